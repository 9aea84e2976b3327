//! Which transports a UCP context opened, read from its own description
//! (`ucp_context_print_info`), and whether any of them does RMA in a NIC
//! that checks keys: [`UcxWorker::has_hardware_rma`](super::UcxWorker::has_hardware_rma).

use super::UcxPtr;
use crate::ucx::ffi;

/// The transports of `ucx`'s context, from `ucp_context_print_info`'s
/// resource lines (`# resource 1 : md 1 dev 1 flags -- tcp/lo`).
pub(super) fn context_transports(ucx: UcxPtr) -> Vec<String> {
    let mut buf: *mut std::ffi::c_char = std::ptr::null_mut();
    let mut len = 0usize;
    // SAFETY: a live context, valid out-pointers.
    let status = unsafe { ffi::mc_ucx_context_info(ucx.0, &mut buf, &mut len) };
    if status != 0 || buf.is_null() {
        return Vec::new();
    }
    // SAFETY: the shim returned a malloc'd text of `len` bytes.
    let text = String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) }).into_owned();
    // SAFETY: the buffer came from mc_ucx_context_info.
    unsafe { ffi::mc_ucx_free_buf(buf.cast()) };
    parse_transports(&text)
}

/// The `tl/device` of every resource line of `ucp_context_print_info`.
fn parse_transports(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.trim_start_matches('#').trim_start().starts_with("resource"))
        .filter_map(|l| l.rsplit_once("-- ").map(|(_, tl)| tl.trim().to_string()))
        .filter(|tl| !tl.is_empty())
        .collect()
}

/// Whether any of `transports` does RMA in a NIC that checks keys.
pub(super) fn hardware_rma(transports: &[String]) -> bool {
    transports.iter().any(|t| ["rc_", "dc_", "gga"].iter().any(|p| t.starts_with(p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transports_are_read_from_the_resource_lines_and_only_rc_dc_gga_are_hardware_rma() {
        let info = "#\n# UCP context\n#\n#     component 1  :  tcp\n#            md 1  :  component 1  tcp \n\
                    #      resource 1  :  md 1  dev 1  flags -- tcp/lo\n\
                    #      resource 4  :  md 3  dev 3  flags -- posix/memory\n#\n";
        let tls = parse_transports(info);
        assert_eq!(tls, ["tcp/lo", "posix/memory"]);
        assert!(!hardware_rma(&tls));
        assert!(!hardware_rma(&["ud_verbs/mlx5_0:1".to_string()]), "UD has no RMA: emulated");
        assert!(hardware_rma(&["tcp/lo".to_string(), "rc_mlx5/mlx5_0:1".to_string()]));
        assert!(hardware_rma(&["dc_mlx5/mlx5_0:1".to_string()]));
    }
}
