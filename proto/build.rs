//! Compiles every `.proto` under `voxpool/` with a vendored `protoc`, so a fresh machine needs
//! no system protobuf compiler, and writes the descriptor set that server reflection serves.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let include = protoc_bin_vendored::include_path()?;
    // SAFETY: build scripts are single-threaded; prost-build reads PROTOC from the environment.
    unsafe { std::env::set_var("PROTOC", protoc) };

    let protos = [
        "voxpool/scheduler/v1/scheduler.proto",
        "voxpool/catalog/v1/catalog.proto",
        "voxpool/synthesis/v1/synthesis.proto",
        "voxpool/jobs/v1/jobs.proto",
    ];
    for proto in &protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        // Decode failures (e.g. invalid UTF-8 in a string field) are INVALID_ARGUMENT.
        .codec_path("crate::codec::VoxpoolCodec")
        .file_descriptor_set_path(out_dir.join("voxpool_descriptor.bin"))
        .compile_protos(&protos, &[".", &include.display().to_string()])?;
    Ok(())
}
