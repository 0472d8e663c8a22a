pub mod proto {
    tonic::include_proto!("rankwatch.v1");
}
fn main() {}
