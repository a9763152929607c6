//! Turning a [`Config`] into rows: which benchmarks run for each mode and size, running
//! them one after another, and the notes that explain what is missing.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::config::Config;
use crate::fabric::{self, Shm};
use crate::measure::{Meter, Progress};
use crate::physical;
use crate::report::{compute_ratios, Row};
use crate::spec::{Layer, Mode, RowSpec};

/// Which code measures a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bench {
    /// [`physical::pingpong`].
    PhysPingpong,
    /// [`physical::ring`].
    PhysRing,
    /// [`physical::memcpy`].
    PhysMemcpy,
    /// [`fabric::run`] on shm.
    FabricShm,
}

/// A row to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// Its layer.
    pub layer: Layer,
    /// Its name within the layer.
    pub name: &'static str,
    /// The code that measures it.
    pub bench: Bench,
    /// Its parameters.
    pub spec: RowSpec,
}

/// The rows `cfg` asks for, in run order: per mode and size, each layer from the bottom.
pub fn plan(cfg: &Config) -> Vec<Planned> {
    let mut out = Vec::new();
    if !cfg.baseline {
        // RPC rows are the only other kind, and they are not in this build yet.
        return out;
    }
    for m in &cfg.modes {
        for &size in &m.sizes {
            let spec = RowSpec {
                mode: m.mode,
                size: size as usize,
                depth: if m.mode == Mode::Lat { 1 } else { m.depth },
                connections: cfg.connections,
                client_core: cfg.client_core(),
                server_core: cfg.server_core(),
            };
            let row = |layer, name, bench| Planned {
                layer,
                name,
                bench,
                spec,
            };
            match m.mode {
                Mode::Lat => {
                    out.push(row(Layer::Physical, "pingpong", Bench::PhysPingpong));
                    out.push(row(Layer::Fabric, "send/recv", Bench::FabricShm));
                }
                Mode::Rate => {
                    out.push(row(Layer::Physical, "ring", Bench::PhysRing));
                    out.push(row(Layer::Fabric, "send", Bench::FabricShm));
                }
                Mode::Bw => {
                    // memcpy first: an RDMA Write on shm is one copy, so that is the
                    // floor the fabric row is compared with.
                    out.push(row(Layer::Physical, "memcpy", Bench::PhysMemcpy));
                    out.push(row(Layer::Physical, "ring", Bench::PhysRing));
                    out.push(row(Layer::Fabric, "write", Bench::FabricShm));
                }
            }
        }
    }
    out
}

/// Runs one planned row.
pub fn run_one(cfg: &Config, p: &Planned, index: usize, total: usize) -> Row {
    let counter = Arc::new(AtomicU64::new(0));
    let label = format!(
        "[{}/{total}] {} {} {} {}",
        index + 1,
        p.spec.mode,
        p.layer,
        p.name,
        crate::units::fmt_size(p.spec.size as u64)
    );
    let _progress = Progress::start(cfg.progress, label, counter.clone());
    let meter = Meter::new(cfg.budget, counter);
    let result = match p.bench {
        Bench::PhysPingpong => physical::pingpong(&p.spec, meter),
        Bench::PhysRing => physical::ring(&p.spec, meter),
        Bench::PhysMemcpy => physical::memcpy(&p.spec, meter),
        Bench::FabricShm => fabric::run::<Shm>(&p.spec, meter),
    };
    match result {
        Ok(m) => Row::measured(p.layer, p.name, &p.spec, m),
        Err(e) => Row::failed(p.layer, p.name, &p.spec, e.to_string()),
    }
}

/// Runs every planned row and computes the ratios.
pub fn run_all(cfg: &Config, planned: &[Planned]) -> Vec<Row> {
    let mut rows: Vec<Row> = planned
        .iter()
        .enumerate()
        .map(|(i, p)| run_one(cfg, p, i, planned.len()))
        .collect();
    compute_ratios(&mut rows);
    rows
}

/// What the reader should know about this run beyond the figures.
pub fn notes(cfg: &Config) -> Vec<String> {
    let mut n = Vec::new();
    if !cfg.rpc_available {
        n.push(
            "RPC rows are not available yet: the RPC engine has not landed, so only the \
             raw-fabric and physical baselines are measured (no RPC figures are shown)."
                .to_owned(),
        );
        n.push(
            "--inline and --credits apply to RPC rows only and are recorded in the JSON \
             configuration."
                .to_owned(),
        );
    }
    if cfg.client_core() == cfg.server_core() {
        n.push(format!(
            "client and server threads share core {}: figures include scheduler hand-offs.",
            cfg.client_core()
        ));
    }
    n.push(
        "latency: lat = one round trip (request and reply of SIZE octets each); bw and rate \
         = post to completion with DEPTH in flight. GB/s counts SIZE octets per operation."
            .to_owned(),
    );
    n
}
