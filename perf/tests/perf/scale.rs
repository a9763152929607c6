//! `rpcrdma-perf scale`: the server in another process with one poll group, then two;
//! every row measured, the one-core rows at ratio 1, and with two connections on two
//! cores each group serving calls (the least loaded group takes the next connection).
//! The server-bound mode (`--proc sink`, a parking client, two rounds) measures the
//! client's and the server's CPU per call and summarises the rounds' ratios.

use std::process::Command;

fn scale(provider: &str) {
    let _turn = crate::one_busy_test_at_a_time();
    let out = Command::new(env!("CARGO_BIN_EXE_rpcrdma-perf"))
        .args(["scale", "--provider", provider, "--server-cores", "0,1"])
        .args(["--connections", "1,2", "--depth", "4"])
        // Long enough for the server's call counters (updated ten times a second) to
        // move inside each row's window.
        .args(["--duration", "500ms", "--warmup", "50ms", "--json"])
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
        // The server's `group` lines carry its held calls and overruns: a
        // well-behaved client never overruns (calls that found every reply context
        // busy were held and served, none dropped).
        assert!(r["held"].is_u64(), "{r}");
        assert_eq!(r["overruns"].as_u64(), Some(0), "{r}");
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

#[test]
fn server_bound_sink_rows_with_a_parking_client_over_shm() {
    let _turn = crate::one_busy_test_at_a_time();
    let out = Command::new(env!("CARGO_BIN_EXE_rpcrdma-perf"))
        .args(["scale", "--provider", "shm", "--server-cores", "0,1"])
        .args(["--proc", "sink", "--size", "16k", "--client-park", "200us"])
        .args(["--connections", "2", "--depth", "4", "--rounds", "2"])
        .args(["--duration", "500ms", "--warmup", "50ms", "--json"])
        .output()
        .expect("runs rpcrdma-perf scale");
    assert!(
        out.status.success(),
        "scale --proc sink: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["procedure"], "sink", "{v}");
    // The payload travels inline: the threshold was raised to hold it.
    assert!(v["inline"].as_u64().unwrap() >= 16 * 1024 + 40, "{v}");
    let rows = v["rows"].as_array().expect("rows");
    // Two rounds of one row on one core and one on two.
    assert_eq!(rows.len(), 4, "{v}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["round"].as_u64(), Some(i as u64 / 2), "{r}");
        assert_eq!(r["server_cores"].as_u64(), Some(i as u64 % 2 + 1), "{r}");
        assert!(r["ops_per_s"].as_f64().unwrap() > 0.0, "{r}");
        // Both ends' CPU per call were measured (the client's clock over the measured
        // stretch, the groups' from their reports).
        assert!(r["client_cpu_ns_per_call"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["server_cpu_ns_per_call"].as_f64().unwrap() > 0.0, "{r}");
        let calls: Vec<u64> = r["group_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_u64().unwrap())
            .collect();
        assert_eq!(
            calls.len() as u64,
            r["server_cores"].as_u64().unwrap(),
            "{r}"
        );
        assert!(
            calls.iter().all(|&c| c > 0),
            "every group served calls: {r}"
        );
    }
    let ratios = v["ratios"].as_array().expect("ratios");
    assert_eq!(ratios.len(), 1, "{v}");
    assert_eq!(ratios[0]["server_cores"], 2, "{v}");
    assert_eq!(ratios[0]["ratios"].as_array().unwrap().len(), 2, "{v}");
    assert!(ratios[0]["median"].as_f64().unwrap() > 0.0, "{v}");
}
