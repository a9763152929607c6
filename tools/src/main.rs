//! The `rpcrdma` command-line tool: decode and encode RPC-over-RDMA transport headers and
//! RFC 8797 private data, and report what this build and machine offer the engine.
//!
//! Exit status: 0 on success, 1 when the input or the environment is at fault (one line
//! on standard error says what and, where possible, how to fix it), 2 for usage errors.
#![warn(missing_docs)]

mod decode;
mod encode;
mod error;
mod hex;
mod info;
mod input;
mod rpc_summary;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use rpcrdma::wire::header::Limits;
use rpcrdma::wire::private_data::{PrivateData, MAX_INLINE_SIZE};
use serde::Serialize;

use crate::error::CliError;

/// Inspect RPC-over-RDMA traffic and this machine's RDMA setup.
#[derive(Debug, Parser)]
#[command(name = "rpcrdma", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print one transport header (or, with --private-data, an RFC 8797 message) as JSON.
    Decode(DecodeArgs),
    /// Turn decode's JSON back into the exact octets.
    Encode(EncodeArgs),
    /// Show built-in providers, RDMA devices, hugepages and CPUs.
    Info(InfoArgs),
}

#[derive(Debug, Args)]
struct DecodeArgs {
    /// The input as hex text (spaces, colons and 0x prefixes allowed; `-` reads hex text
    /// from standard input).
    #[arg(long, value_name = "HEX", conflicts_with = "file")]
    hex: Option<String>,
    /// A binary file holding the message; `-` (the default) is standard input.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// One line of JSON instead of indented JSON.
    #[arg(long)]
    compact: bool,
    /// Decode RFC 8797 connection private data (searched for at any offset) instead of a
    /// transport header.
    #[arg(long)]
    private_data: bool,
    /// With --private-data: this end's advertisement as SEND,RECV[,ri] (sizes in octets,
    /// k suffix allowed), used to work out the negotiated thresholds. Default: the
    /// largest sizes with R set, so the result shows the peer's limits.
    #[arg(long, value_name = "SEND,RECV[,ri]", requires = "private_data")]
    local: Option<String>,
    /// Accept any number of chunks and segments and an RPC message with another XID (or
    /// none), e.g. for headers captured without their payload. By default the engine's
    /// limits apply, so errors name the reply the engine would send.
    #[arg(long, conflicts_with = "private_data")]
    permissive: bool,
}

#[derive(Debug, Args)]
struct EncodeArgs {
    /// The JSON (decode's output, or its "header" object); `-` (the default) is standard
    /// input.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// Write hex words and a newline instead of raw octets.
    #[arg(long)]
    hex: bool,
}

#[derive(Debug, Args)]
struct InfoArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Read /sys and /proc under this directory instead of / (for tests).
    #[arg(long, hide = true, default_value = "/")]
    root: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(a) => run_decode(&a),
        Command::Encode(a) => run_encode(&a),
        Command::Info(a) => run_info(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpcrdma: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write_stdout(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(CliError::Write)
}

fn print_json<T: Serialize>(value: &T, compact: bool) -> Result<(), CliError> {
    let mut text = if compact {
        serde_json::to_string(value)
    } else {
        serde_json::to_string_pretty(value)
    }
    .map_err(CliError::Json)?;
    text.push('\n');
    write_stdout(text.as_bytes())
}

fn run_decode(a: &DecodeArgs) -> Result<(), CliError> {
    let file = a.file.clone().unwrap_or_else(input::stdin_path);
    let buf = input::octets(a.hex.as_deref(), &file)?;
    if a.private_data {
        let local = match &a.local {
            Some(s) => parse_local(s)?,
            None => PrivateData::new(MAX_INLINE_SIZE, MAX_INLINE_SIZE, true),
        };
        let d = decode::decode_private_data(&buf, local)?;
        return print_json(&d, a.compact);
    }
    let limits = if a.permissive {
        Limits::PERMISSIVE
    } else {
        Limits::DEFAULT
    };
    let d = decode::decode_header(&buf, &limits)?;
    print_json(&d, a.compact)
}

fn run_encode(a: &EncodeArgs) -> Result<(), CliError> {
    let path = a.file.clone().unwrap_or_else(input::stdin_path);
    let raw = input::read_all(&path)?;
    let text = String::from_utf8_lossy(&raw);
    let enc = encode::encode_json(&text, &Limits::PERMISSIVE)?;
    if let Some(w) = &enc.warning {
        eprintln!("rpcrdma: {w}");
    }
    if a.hex {
        let mut line = hex::format_words(&enc.bytes);
        line.push('\n');
        write_stdout(line.as_bytes())
    } else if std::io::stdout().is_terminal() {
        Err(CliError::BinaryToTerminal)
    } else {
        write_stdout(&enc.bytes)
    }
}

fn run_info(a: &InfoArgs) -> Result<(), CliError> {
    let info = info::gather(Path::new(&a.root));
    if a.json {
        print_json(&info, false)
    } else {
        write_stdout(info::render(&info).as_bytes())
    }
}

/// Parses `SEND,RECV[,ri]` for `--local`.
fn parse_local(s: &str) -> Result<PrivateData, CliError> {
    let bad = |reason: String| CliError::BadArgument {
        option: "--local",
        reason,
    };
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let (send, recv, ri) = match parts.as_slice() {
        [send, recv] => (*send, *recv, false),
        [send, recv, "ri"] => (*send, *recv, true),
        _ => {
            return Err(bad(format!(
                "expected SEND,RECV or SEND,RECV,ri (e.g. 4k,4k,ri), got {s:?}"
            )))
        }
    };
    let size = |v: &str| -> Result<u32, CliError> {
        let (digits, mult) = match v.strip_suffix(['k', 'K']) {
            Some(d) => (d, 1024),
            None => (v, 1),
        };
        digits
            .parse::<u32>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .ok_or_else(|| bad(format!("{v:?} is not a size in octets (e.g. 4096 or 4k)")))
    };
    let local = PrivateData::new(size(send)?, size(recv)?, ri);
    // An advertisement that cannot be encoded could never have been sent.
    local.to_bytes().map_err(|e| {
        bad(format!(
            "{e} (sizes must be multiples of 1024 from 1k to 256k)"
        ))
    })?;
    Ok(local)
}
