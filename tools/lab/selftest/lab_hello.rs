//! Tiny host-built program that the lab selftest runs inside the guest: it proves that a
//! binary compiled on the host runs there, sees the arguments and environment the host
//! passed, runs on the lab kernel (not the host's), and can hand files back through $LAB_OUT.

use std::process::ExitCode;

fn main() -> ExitCode {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|e| format!("unreadable ({e})"));
    println!("lab_hello: kernel={release}");
    for (i, arg) in std::env::args().enumerate().skip(1) {
        println!("lab_hello: arg[{i}]={arg}");
    }
    let token = std::env::var("LAB_HELLO_TOKEN").unwrap_or_default();
    println!("lab_hello: token={token}");
    let ib: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    println!("lab_hello: ib_devices={}", ib.join(","));
    if let Ok(out) = std::env::var("LAB_OUT") {
        let body = format!("kernel={release}\ntoken={token}\n");
        if let Err(e) = std::fs::write(format!("{out}/lab_hello.txt"), body) {
            eprintln!("lab_hello: cannot write to {out}: {e}");
            return ExitCode::from(2);
        }
    }
    let code = std::env::var("LAB_HELLO_EXIT")
        .ok()
        .and_then(|s| s.parse::<u8>().ok())
        .unwrap_or(0);
    ExitCode::from(code)
}
