//! Compiles the vendored etcd subset (`proto/etcd_kv.proto`) with a vendored
//! `protoc`, like `proto/build.rs`, so the etcd baseline needs no system
//! protoc and no etcd client crate. Only the client side is generated, and
//! only with feature `baselines` (the etcd and Redis baselines).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "baselines")]
    etcd_client()?;
    Ok(())
}

#[cfg(feature = "baselines")]
fn etcd_client() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path()?;
        // SAFETY: build scripts are single-threaded at this point.
        unsafe { std::env::set_var("PROTOC", protoc) };
    }
    let proto = "proto/etcd_kv.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_prost_build::configure().build_server(false).compile_protos(&[proto], &["proto"])?;
    Ok(())
}
