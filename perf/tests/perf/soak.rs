//! `rpcrdma-perf soak` end to end, briefly: separate client and server processes, random
//! faults on both sides, the server killed with SIGKILL and restarted halfway. It must
//! account for every call (`lost 0 duplicated 0 leaked 0`) and exit 0. The 10-minute
//! runs are the release bar (README).

use std::process::Command;

fn soak(provider: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_rpcrdma-perf"))
        .args([
            "soak",
            "--provider",
            provider,
            "--connections",
            "6",
            "--duration",
            "3",
            "--faults",
            "--seed",
            "7",
        ])
        .output()
        .expect("runs rpcrdma-perf soak");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "soak on {provider} passed:\n{text}\n{err}"
    );
    let last = text.lines().last().unwrap_or("");
    assert!(
        last.starts_with("lost 0 duplicated 0 leaked 0 "),
        "the accounting line: {last:?}\n{text}"
    );
    let summary = text.lines().next().unwrap_or("");
    assert!(
        summary.contains("server killed and restarted") && summary.contains("faults"),
        "{summary}"
    );
    // Calls went through, and faults failed some (each counted, none lost).
    let field = |name: &str| -> u64 {
        summary
            .split_whitespace()
            .skip_while(|w| *w != name)
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {summary}"))
    };
    assert!(field("completed") > 1000, "{summary}");
    assert!(field("failed") > 0, "{summary}");
    assert_eq!(
        field("issued"),
        field("completed") + field("failed"),
        "{summary}"
    );
}

#[test]
fn soak_on_shm_accounts_for_every_call() {
    soak("shm");
}

#[test]
fn soak_on_siw_accounts_for_every_call() {
    soak("siw");
}
