//! Generates the daemon stand-in's gRPC server from `proto/daemon.proto`, compiled in-process by
//! protox (no `protoc` to install).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/daemon.proto");
    let fds = protox::compile(["proto/daemon.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
