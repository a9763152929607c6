//! The `rpcrdma` command-line tool.

fn main() {
    println!("rpcrdma {}", env!("CARGO_PKG_VERSION"));
}
