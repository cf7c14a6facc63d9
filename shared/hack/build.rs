//! No build step: the crate exists for its [build-dependencies]' features (host-side unification).

fn main() {}
