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
    compile_raw_collector_server();
    Ok(())
}

/// The server side of `rankwatch.v1.Collector` with a codec that hands each
/// `EventBatch` over undecoded, for the zero-copy reader of `src/event/wire.rs`.
/// Same service, methods and messages on the wire as the proto's.
fn compile_raw_collector_server() {
    use tonic_build::manual::{Builder, Method, Service};
    let method = |name: &str, route: &str| {
        Method::builder()
            .name(name)
            .route_name(route)
            .input_type("crate::engine::RawBatch")
            .output_type("crate::proto::IngestAck")
            .codec_path("crate::server::codec::RawCodec")
    };
    let service = Service::builder()
        .name("Collector")
        .package("rankwatch.v1")
        .method(
            method("ingest", "Ingest")
                .client_streaming()
                .server_streaming()
                .build(),
        )
        .method(method("ingest_batch", "IngestBatch").build())
        .build();
    Builder::new().build_client(false).compile(&[service]);
}
