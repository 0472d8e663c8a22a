//! Compiles the public proto with protox (a pure-Rust protobuf compiler), so
//! building needs nothing but cargo: no system `protoc`.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/rankwatch/v1/rankwatch.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("rankwatch_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .skip_protoc_run()
        .file_descriptor_set_path(out_dir.join("rankwatch_descriptor.bin"))
        .compile_fds(descriptors)?;
    Ok(())
}
