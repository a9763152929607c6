//! `rpcrdma-perf server`: the responder side of a two-host run, as perftest splits its
//! tools. It serves the built-in programs (NULL and echo, as `rpcrdma serve` does) on
//! one busy-polling thread until killed (or for `--for` seconds); the other host runs
//! `rpcrdma-perf lat|bw|rate --connect ADDR`.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Parser;
use rpcrdma::fabric::Provider;
use rpcrdma::Responder;
use rpcrdma_ulp::program::Dispatcher;

use crate::cli::{CoreList, ProviderName};
use crate::fabric::{FabricKind, Shm, Siw};
use crate::rpc::{busy_serve, dispatcher, server_config, RpcParams};
use crate::spec::{pin, BenchError};
use crate::units;

/// `rpcrdma-perf server`.
#[derive(Debug, Parser)]
#[command(name = "rpcrdma-perf server")]
pub struct ServerArgs {
    /// Fabric provider.
    #[arg(long, value_enum, default_value = "shm")]
    pub provider: ProviderName,
    /// Where to listen: shm NAME or /PATH (default rpcrdma-perf), siw and verbs IP:PORT
    /// (siw default 0.0.0.0:20050; verbs: an address the RDMA device owns).
    #[arg(long)]
    pub addr: Option<String>,
    /// Largest call or reply the clients will use (sizes the large buffers).
    #[arg(long, default_value = "1m", value_parser = units::parse_size)]
    pub max_size: u64,
    /// Inline threshold in octets (both directions; clients negotiate down to theirs).
    #[arg(long = "inline", default_value = "4k", value_parser = units::parse_size)]
    pub inline: u64,
    /// Credits granted per connection.
    #[arg(long, default_value_t = 128)]
    pub credits: u32,
    /// Core to pin the polling thread to.
    #[arg(long, conflicts_with = "cores")]
    pub core: Option<usize>,
    /// Serve with one poll group per listed core (`0,1`): a pinned poller each, one
    /// completion queue per group, connections to the least loaded group; prints each
    /// group's calls and busy time (what `rpcrdma-perf scale` reads).
    #[arg(long, value_parser = core_list, value_name = "LIST")]
    pub cores: Option<CoreList>,
    /// With `--cores`: receives in each group's shared receive queue (each holding an
    /// inline-sized buffer); 0 sizes it for the server's connection cap (1024), which
    /// with large inline buffers is a lot of memory every call's buffer is drawn from
    /// in turn.
    #[arg(long, default_value_t = 0, requires = "cores")]
    pub srq_depth: u32,
    /// Stop after this many seconds (default: run until killed).
    #[arg(long = "for")]
    pub run_for: Option<f64>,
}

/// Entry point: `rpcrdma-perf server ...` (argv without the program name and `server`).
pub fn main(args: impl IntoIterator<Item = String>) -> std::process::ExitCode {
    let args =
        ServerArgs::parse_from(std::iter::once("rpcrdma-perf server".to_owned()).chain(args));
    let r = match args.provider {
        ProviderName::Shm => serve::<Shm>(&args, "rpcrdma-perf"),
        ProviderName::Siw => serve::<Siw>(&args, "0.0.0.0:20050"),
        #[cfg(feature = "verbs")]
        ProviderName::Verbs => serve::<crate::fabric::Verbs>(&args, ""),
        #[cfg(not(feature = "verbs"))]
        ProviderName::Verbs => Err(BenchError::Setup(
            "verbs is not built into rpcrdma-perf (feature `verbs`)".into(),
        )),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpcrdma-perf server: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

fn core_list(s: &str) -> Result<CoreList, units::ParseError> {
    units::parse_cores(s).map(CoreList)
}

fn serve<F: FabricKind>(args: &ServerArgs, default_addr: &str) -> Result<(), BenchError> {
    let text = args.addr.as_deref().unwrap_or(default_addr);
    if text.is_empty() {
        return Err(BenchError::Setup("--addr is required for verbs".into()));
    }
    let addr: <F::P as Provider>::Addr = F::parse_addr(text)?;
    let params = RpcParams {
        inline: u32::try_from(args.inline).unwrap_or(u32::MAX),
        credits: args.credits,
        client_park: None,
    };
    let cfg = server_config(args.max_size as usize, params);
    cfg.validate()
        .map_err(|e| BenchError::Setup(format!("configuration: {e}")))?;
    let source_max = args.max_size as usize;
    let end = args
        .run_for
        .map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
    if let Some(cores) = &args.cores {
        println!(
            "rpcrdma-perf server: {} listening on {text} (calls up to {} octets, inline {}, {} \
             credits)",
            args.provider.name(),
            args.max_size,
            args.inline,
            args.credits
        );
        let factory = move || Some(dispatcher(source_max));
        let opts = rpcrdma::GroupOptions {
            srq_depth: args.srq_depth,
            ..rpcrdma::GroupOptions::default()
        };
        return crate::groups::serve::<F::P, _>(
            F::open()?,
            &addr,
            cfg,
            factory,
            &cores.0,
            opts,
            end,
        );
    }
    let mut server = Responder::<F::P, Dispatcher, _>::bind(F::open()?, &addr, cfg, move || {
        Some(dispatcher(source_max))
    })
    .map_err(|e| BenchError::Setup(format!("listen on {text}: {e}")))?;
    if let Some(core) = args.core {
        pin(core);
    }
    println!(
        "rpcrdma-perf server: {} listening on {text} (calls up to {} octets, inline {}, {} \
         credits)",
        args.provider.name(),
        args.max_size,
        args.inline,
        args.credits
    );
    let _ = std::io::stdout().flush();
    busy_serve(&mut server, &std::sync::atomic::AtomicBool::new(false), end);
    Ok(())
}
