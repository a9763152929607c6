//! `rpcrdma info`: what this build and this machine offer the engine.
//!
//! Everything is read from files under a root directory (`/` normally) so that tests can
//! point it at a made-up tree.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use serde::Serialize;

/// A fabric provider and whether this binary has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderInfo {
    /// "shm", "siw" or "verbs".
    pub name: &'static str,
    /// Compiled into this binary.
    pub built: bool,
    /// What it is, or how to get it.
    pub note: &'static str,
}

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PortInfo {
    /// Port number.
    pub port: u32,
    /// `state`, e.g. "4: ACTIVE".
    pub state: Option<String>,
    /// `link_layer`, e.g. "Ethernet" or "InfiniBand".
    pub link_layer: Option<String>,
}

/// One entry of `/sys/class/infiniband`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceInfo {
    /// Device name, e.g. "siw0", "rxe0", "mlx5_0".
    pub name: String,
    /// `node_type`, e.g. "1: CA" or "4: RNIC".
    pub node_type: Option<String>,
    /// Its ports.
    pub ports: Vec<PortInfo>,
}

/// Hugepage counters from `/proc/meminfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HugepageInfo {
    /// `HugePages_Total`.
    pub total: Option<u64>,
    /// `HugePages_Free`.
    pub free: Option<u64>,
    /// `Hugepagesize` in kB.
    pub size_kb: Option<u64>,
    /// The command that reserves 1 GiB of hugepages.
    pub how_to_reserve: String,
}

/// Everything `info` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Info {
    /// Tool version.
    pub version: &'static str,
    /// Providers, built or not.
    pub providers: Vec<ProviderInfo>,
    /// RDMA devices; empty when there are none (or no `/sys/class/infiniband`).
    pub rdma_devices: Vec<DeviceInfo>,
    /// Hugepage status.
    pub hugepages: HugepageInfo,
    /// CPUs this process may run on.
    pub cpus_usable: usize,
    /// `/sys/devices/system/cpu/online`, e.g. "0-1".
    pub cpus_online: Option<String>,
}

fn providers() -> Vec<ProviderInfo> {
    vec![
        ProviderInfo {
            name: "shm",
            built: true,
            note: "shared-memory provider between processes on this host; always built",
        },
        // serve, call and nfs use rpcrdma::fabric::siw unconditionally: it is in every
        // build.
        ProviderInfo {
            name: "siw",
            built: true,
            note: "userspace software iWARP over TCP (MPA/DDP/RDMAP); always built",
        },
        ProviderInfo {
            name: "verbs",
            built: cfg!(feature = "verbs"),
            note: if cfg!(feature = "verbs") {
                "rdma-core verbs provider"
            } else {
                "rdma-core verbs provider; rebuild with --features verbs"
            },
        },
    ]
}

fn read_trimmed(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn devices(root: &Path) -> Vec<DeviceInfo> {
    let class = root.join("sys/class/infiniband");
    let Ok(entries) = fs::read_dir(&class) else {
        return Vec::new();
    };
    let mut out: Vec<DeviceInfo> = entries
        .flatten()
        .map(|e| {
            let dir = e.path();
            let mut ports: Vec<PortInfo> = fs::read_dir(dir.join("ports"))
                .map(|it| {
                    it.flatten()
                        .filter_map(|p| {
                            let port = p.file_name().to_str()?.parse().ok()?;
                            Some(PortInfo {
                                port,
                                state: read_trimmed(&p.path().join("state")),
                                link_layer: read_trimmed(&p.path().join("link_layer")),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            ports.sort_by_key(|p| p.port);
            DeviceInfo {
                name: e.file_name().to_string_lossy().into_owned(),
                node_type: read_trimmed(&dir.join("node_type")),
                ports,
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn meminfo_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

fn hugepages(root: &Path) -> HugepageInfo {
    let text = fs::read_to_string(root.join("proc/meminfo")).unwrap_or_default();
    let size_kb = meminfo_value(&text, "Hugepagesize");
    let pages = 1024 * 1024 / size_kb.filter(|&s| s > 0).unwrap_or(2048);
    HugepageInfo {
        total: meminfo_value(&text, "HugePages_Total"),
        free: meminfo_value(&text, "HugePages_Free"),
        size_kb,
        how_to_reserve: format!(
            "sysctl -w vm.nr_hugepages={} (as root; 1 GiB; put vm.nr_hugepages={} in \
             /etc/sysctl.d/ to keep it)",
            pages.max(1),
            pages.max(1)
        ),
    }
}

/// Gathers everything from the tree under `root`.
pub fn gather(root: &Path) -> Info {
    Info {
        version: env!("CARGO_PKG_VERSION"),
        providers: providers(),
        rdma_devices: devices(root),
        hugepages: hugepages(root),
        cpus_usable: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpus_online: read_trimmed(&root.join("sys/devices/system/cpu/online")),
    }
}

fn or_unknown(v: Option<u64>) -> String {
    v.map_or_else(|| "unknown".to_owned(), |v| v.to_string())
}

/// The human-readable report.
pub fn render(info: &Info) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "rpcrdma {}", info.version);
    let _ = writeln!(s, "providers:");
    for p in &info.providers {
        let state = if p.built { "built in" } else { "not built" };
        let _ = writeln!(s, "  {:<6} {:<10} {}", p.name, state, p.note);
    }
    if info.rdma_devices.is_empty() {
        let _ = writeln!(s, "rdma devices: none");
    } else {
        let _ = writeln!(s, "rdma devices:");
        for d in &info.rdma_devices {
            let _ = writeln!(
                s,
                "  {} (node type {})",
                d.name,
                d.node_type.as_deref().unwrap_or("unknown")
            );
            for p in &d.ports {
                let _ = writeln!(
                    s,
                    "    port {}: {}, {}",
                    p.port,
                    p.state.as_deref().unwrap_or("state unknown"),
                    p.link_layer.as_deref().unwrap_or("link layer unknown")
                );
            }
        }
    }
    let h = &info.hugepages;
    let _ = writeln!(
        s,
        "hugepages: {} free of {}, page size {} kB",
        or_unknown(h.free),
        or_unknown(h.total),
        or_unknown(h.size_kb)
    );
    if h.free.unwrap_or(0) == 0 {
        let _ = writeln!(s, "  to reserve: {}", h.how_to_reserve);
    }
    let _ = writeln!(
        s,
        "cpus: {} usable (online: {})",
        info.cpus_usable,
        info.cpus_online.as_deref().unwrap_or("unknown")
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "rpcrdma-info-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn reads_devices_hugepages_and_cpus() {
        let root = tree();
        let port = root.join("sys/class/infiniband/siw0/ports/1");
        fs::create_dir_all(&port).unwrap();
        fs::write(
            root.join("sys/class/infiniband/siw0/node_type"),
            "4: RNIC\n",
        )
        .unwrap();
        fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
        fs::create_dir_all(root.join("proc")).unwrap();
        fs::write(
            root.join("proc/meminfo"),
            "MemTotal: 100 kB\nHugePages_Total:      16\nHugePages_Free:       12\nHugepagesize:    2048 kB\n",
        )
        .unwrap();
        fs::create_dir_all(root.join("sys/devices/system/cpu")).unwrap();
        fs::write(root.join("sys/devices/system/cpu/online"), "0-1\n").unwrap();

        let info = gather(&root);
        assert_eq!(info.rdma_devices.len(), 1);
        assert_eq!(info.rdma_devices[0].name, "siw0");
        assert_eq!(info.rdma_devices[0].node_type.as_deref(), Some("4: RNIC"));
        assert_eq!(
            info.rdma_devices[0].ports,
            vec![PortInfo {
                port: 1,
                state: Some("4: ACTIVE".into()),
                link_layer: Some("Ethernet".into())
            }]
        );
        assert_eq!(info.hugepages.total, Some(16));
        assert_eq!(info.hugepages.free, Some(12));
        assert_eq!(info.hugepages.size_kb, Some(2048));
        assert!(info
            .hugepages
            .how_to_reserve
            .contains("vm.nr_hugepages=512"));
        assert_eq!(info.cpus_online.as_deref(), Some("0-1"));
        let text = render(&info);
        assert!(text.contains("siw0 (node type 4: RNIC)"), "{text}");
        assert!(text.contains("hugepages: 12 free of 16"), "{text}");
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn missing_files_mean_none_and_unknown() {
        let root = tree().join("empty");
        let info = gather(&root);
        assert!(info.rdma_devices.is_empty());
        assert_eq!(info.hugepages.total, None);
        let text = render(&info);
        assert!(text.contains("rdma devices: none"), "{text}");
        assert!(
            text.contains("to reserve: sysctl -w vm.nr_hugepages="),
            "{text}"
        );
        assert!(info.providers.iter().any(|p| p.name == "shm" && p.built));
        assert!(info.providers.iter().any(|p| p.name == "siw" && p.built));
    }
}
