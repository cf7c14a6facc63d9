//! The voxpool synthesis service (work in progress).

pub mod vendor;
