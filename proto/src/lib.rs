//! Generated protobuf and gRPC types for voxpool, one module per `package`.
//!
//! The `.proto` files under `proto/voxpool/<service>/v1/` are the wire contract; the Rust here
//! is generated at build time (never checked in). [`FILE_DESCRIPTOR_SET`] feeds the gRPC server
//! reflection services so `grpcurl list` / `describe` work without local proto files.

pub mod codec;

pub use prost;
pub use prost_types;
pub use tonic;

/// Encoded `google.protobuf.FileDescriptorSet` of every voxpool proto, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/voxpool_descriptor.bin"));

/// `voxpool.scheduler.v1`: the pool scheduler that leases vendor keys.
pub mod scheduler {
    /// Version 1 of the scheduler API.
    pub mod v1 {
        #![allow(missing_docs, clippy::doc_lazy_continuation)]
        tonic::include_proto!("voxpool.scheduler.v1");
    }
}

/// `voxpool.catalog.v1`: voice packs, snapshots and card binding.
pub mod catalog {
    /// Version 1 of the catalog API.
    pub mod v1 {
        #![allow(missing_docs, clippy::doc_lazy_continuation)]
        tonic::include_proto!("voxpool.catalog.v1");
    }
}

/// `voxpool.synthesis.v1`: text to speech through the pool.
pub mod synthesis {
    /// Version 1 of the synthesis API.
    pub mod v1 {
        #![allow(missing_docs, clippy::doc_lazy_continuation)]
        tonic::include_proto!("voxpool.synthesis.v1");
    }
}

/// `voxpool.jobs.v1`: durable batch synthesis jobs.
pub mod jobs {
    /// Version 1 of the jobs API.
    pub mod v1 {
        #![allow(missing_docs, clippy::doc_lazy_continuation)]
        tonic::include_proto!("voxpool.jobs.v1");
    }
}
