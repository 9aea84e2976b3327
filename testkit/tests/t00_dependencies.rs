//! Keeps the crate graph of docs/ARCHITECTURE.md true: `cargo metadata` must
//! show no normal dependency edge that the table does not allow.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    let rows: &[(&str, &[&str])] = &[
        ("mooncake-admission", &[]),
        ("mooncake-tls", &[]),
        ("mooncake-auth", &[]),
        ("mooncake-proto", &[]),
        ("mooncake-segment", &[]),
        ("mooncake-raft-store", &["mooncake-segment"]),
        (
            "mooncake-master",
            &[
                "mooncake-admission",
                "mooncake-auth",
                "mooncake-proto",
                "mooncake-segment",
                "mooncake-raft-store",
                "mooncake-tls",
            ],
        ),
        ("mooncake-transfer", &["mooncake-admission", "mooncake-auth", "mooncake-segment", "mooncake-tls"]),
        (
            "mooncake-client",
            &["mooncake-auth", "mooncake-proto", "mooncake-segment", "mooncake-transfer", "mooncake-tls"],
        ),
        ("mooncake-local-cluster", &["mooncake-auth", "mooncake-client", "mooncake-proto", "mooncake-tls"]),
        (
            "mooncake-cli",
            &[
                "mooncake-auth",
                "mooncake-benches",
                "mooncake-client",
                "mooncake-local-cluster",
                "mooncake-master",
                "mooncake-proto",
                "mooncake-raft-store",
                "mooncake-segment",
                "mooncake-transfer",
                "mooncake-tls",
                "mooncake-zmq-events",
            ],
        ),
        ("mooncake-zmq-events", &["mooncake-client", "mooncake-proto"]),
        (
            "mooncake-testkit",
            &[
                "mooncake-auth",
                "mooncake-client",
                "mooncake-local-cluster",
                "mooncake-master",
                "mooncake-proto",
                "mooncake-tls",
            ],
        ),
        (
            "mooncake-py",
            &[
                "mooncake-auth",
                "mooncake-client",
                "mooncake-proto",
                "mooncake-segment",
                "mooncake-tls",
                "mooncake-transfer",
            ],
        ),
        (
            "mooncake-jepsen",
            &[
                "mooncake-auth",
                "mooncake-client",
                "mooncake-local-cluster",
                "mooncake-proto",
                "mooncake-segment",
                "mooncake-testkit",
                "mooncake-tls",
                "mooncake-transfer",
            ],
        ),
        (
            "mooncake-benches",
            &[
                "mooncake-client",
                "mooncake-local-cluster",
                "mooncake-proto",
                "mooncake-segment",
                "mooncake-transfer",
                "mooncake-raft-store",
                "mooncake-testkit",
                "mooncake-tls",
            ],
        ),
    ];
    rows.iter().map(|(k, v)| (*k, v.iter().copied().collect())).collect()
}

#[test]
fn workspace_dependencies_point_one_way() {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata json");
    let allowed = allowed();
    let packages = meta["packages"].as_array().expect("packages");
    let mut checked = 0;
    for p in packages {
        let name = p["name"].as_str().unwrap_or_default();
        let Some(ok) = allowed.get(name) else {
            panic!("crate {name} is not in the dependency table of this test and docs/ARCHITECTURE.md; add it");
        };
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let dep = d["name"].as_str().unwrap_or_default();
            let normal = d["kind"].is_null();
            if normal && dep.starts_with("mooncake-") {
                assert!(ok.contains(dep), "forbidden dependency edge {name} -> {dep} (see docs/ARCHITECTURE.md)");
            }
        }
        checked += 1;
    }
    assert_eq!(checked, allowed.len(), "every workspace crate was checked");
}
