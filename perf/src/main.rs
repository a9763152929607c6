//! `rpcrdma-perf`: the benchmark harness.

fn main() {
    println!("rpcrdma-perf {}", env!("CARGO_PKG_VERSION"));
}
