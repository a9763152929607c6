//! `rpcrdma-perf scale`: the server in another process with one poll group, then two;
//! every row measured, the one-core rows at ratio 1, and with two connections on two
//! cores each group serving calls (the least loaded group takes the next connection).

use std::process::Command;

fn scale(provider: &str) {
    let _turn = crate::one_busy_test_at_a_time();
    let out = Command::new(env!("CARGO_BIN_EXE_rpcrdma-perf"))
        .args(["scale", "--provider", provider, "--server-cores", "0,1"])
        .args(["--connections", "1,2", "--depth", "4"])
        .args(["--duration", "200ms", "--warmup", "50ms", "--json"])
        .output()
        .expect("runs rpcrdma-perf scale");
    assert!(
        out.status.success(),
        "scale over {provider}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "{v}");
    for r in rows {
        assert!(r["ops_per_s"].as_f64().unwrap() > 0.0, "{r}");
        let groups = r["group_calls"].as_array().unwrap();
        assert_eq!(
            groups.len() as u64,
            r["server_cores"].as_u64().unwrap(),
            "{r}"
        );
        // The server counted the row's calls (its counters lag by at most 150 ms).
        assert!(
            groups.iter().map(|g| g.as_u64().unwrap()).sum::<u64>() > 0,
            "{r}"
        );
        if r["server_cores"] == 1 {
            assert_eq!(r["vs_one_core"].as_f64(), Some(1.0), "{r}");
        }
        if r["server_cores"] == 2 && r["connections"] == 2 {
            assert!(
                groups.iter().all(|g| g.as_u64().unwrap() > 0),
                "both groups: {r}"
            );
        }
    }
    assert!(
        v["model"]["busy_ns_per_call"].as_f64().unwrap() > 0.0,
        "{v}"
    );
}

#[test]
fn scale_rows_over_shm() {
    scale("shm");
}

#[test]
fn scale_rows_over_siw() {
    scale("siw");
}
