//! Compiles the `.proto` files with a vendored `protoc`, so a fresh clone
//! builds without any manual install.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("PROTOC").is_none() {
        let protoc = protoc_bin_vendored::protoc_bin_path()?;
        // SAFETY: build scripts are single-threaded at this point.
        unsafe { std::env::set_var("PROTOC", protoc) };
    }
    let protos = ["proto/common.proto", "proto/master.proto", "proto/raft.proto", "proto/admin.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    // Every service decodes with StrictCodec: a malformed request is
    // INVALID_ARGUMENT, not INTERNAL.
    tonic_prost_build::configure().codec_path("crate::codec::StrictCodec").compile_protos(&protos, &["proto"])?;
    Ok(())
}
