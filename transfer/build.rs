//! Compiles the UCX shim (`csrc/ucx_shim.c`) and links libucp and libucs
//! when the `ucx` feature is on; does nothing otherwise.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "ucx")]
    ucx();
}

#[cfg(feature = "ucx")]
fn ucx() {
    println!("cargo:rerun-if-changed=csrc/ucx_shim.c");
    println!("cargo:rerun-if-env-changed=UCX_DIR");
    let mut build = cc::Build::new();
    build.file("csrc/ucx_shim.c").warnings(true).extra_warnings(true).flag_if_supported("-Werror");
    // UCX_DIR: an install prefix (e.g. libucx-cu12's, or HPC-X's) instead of
    // the system's /usr.
    if let Ok(dir) = std::env::var("UCX_DIR") {
        build.include(format!("{dir}/include"));
        println!("cargo:rustc-link-search=native={dir}/lib");
    }
    build.compile("mooncake_ucx_shim");
    println!("cargo:rustc-link-lib=dylib=ucp");
    println!("cargo:rustc-link-lib=dylib=ucs");
}
