//! Generates the mcm.driver.v1 client and server from the committed proto,
//! compiled by protox (pure Rust: no system `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time, not with `env!`: a build script compiled in one
    // checkout is reused by cargo in another that shares the target folder.
    let manifest = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = std::path::Path::new(&manifest).join("../../proto");
    let file = root.join("mcm/driver/v1/driver.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
