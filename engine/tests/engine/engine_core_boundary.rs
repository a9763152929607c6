//! The protocol core is sans-IO: from `fabric` it may name plain data only (work
//! requests, completions, statuses, keys and their arithmetic), never a provider trait
//! (`QueuePair`, `MemoryRegion`, `Device`, ...) or a provider's capabilities. This test
//! reads `engine/src/core/` and fails on any other `fabric` name, so the boundary holds
//! by construction rather than by review.

use std::path::Path;

/// What the core may take from `fabric`: data it stages or receives, and key layout.
const ALLOWED: &[&str] = &[
    "Access",
    "Completion",
    "PeerAbort",
    "PostError",
    "RecvWr",
    "RemoteAddr",
    "SendFlags",
    "SendOp",
    "SendWr",
    "Sge",
    "WcOpcode",
    "WcStatus",
    "mr::retag_key",
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("core source directory") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `fabric` name some source (comments dropped) uses: `crate::fabric::X`,
/// `crate::fabric::{X, Y}` (over several lines too) and `crate::fabric::m::X`.
fn fabric_names(source: &str) -> Vec<String> {
    let code: String = source
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ");
    let mut names = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::fabric::") {
        rest = &rest[at + "crate::fabric::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            names.extend(
                group[..end]
                    .split(',')
                    .map(|n| n.trim().to_string())
                    .filter(|n| !n.is_empty()),
            );
        } else {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            names.push(rest[..end].trim_end_matches(':').to_string());
        }
    }
    names
}

#[test]
fn the_core_names_only_plain_data_from_the_fabric() {
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core");
    let mut files = Vec::new();
    rust_files(&core, &mut files);
    assert!(files.len() > 10, "found the core's sources");
    let mut seen = 0;
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("readable");
        // Unit tests inside the core may build fixtures from providers.
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        for name in fabric_names(text) {
            seen += 1;
            if !ALLOWED.contains(&name.as_str()) {
                bad.push(format!("{}: fabric::{name}", f.display()));
            }
        }
    }
    assert!(seen > 0, "the scan found the core's fabric imports");
    assert!(
        bad.is_empty(),
        "the core names fabric internals:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_scan_sees_grouped_and_nested_names() {
    assert_eq!(
        fabric_names("use crate::fabric::{Completion, MemoryRegion};"),
        ["Completion", "MemoryRegion"]
    );
    assert_eq!(fabric_names("x: crate::fabric::QueuePair,"), ["QueuePair"]);
    assert_eq!(
        fabric_names("use crate::fabric::mr::retag_key;"),
        ["mr::retag_key"]
    );
    assert_eq!(
        fabric_names("use crate::fabric::{\n    Device, // why\n    Sge,\n};"),
        ["Device", "Sge"]
    );
    assert!(fabric_names("// crate::fabric::Device in a comment").is_empty());
}
