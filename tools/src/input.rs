//! Where a subcommand's input comes from: `--hex` text, a file, or standard input (`-`).

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::error::CliError;
use crate::hex;

/// Reads all of `path`, or standard input when it is `-`.
pub fn read_all(path: &Path) -> Result<Vec<u8>, CliError> {
    if path == Path::new("-") {
        let mut buf = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut buf)
            .map_err(|source| CliError::Read { path: None, source })?;
        Ok(buf)
    } else {
        std::fs::read(path).map_err(|source| CliError::Read {
            path: Some(path.to_path_buf()),
            source,
        })
    }
}

/// The octets to decode: `--hex` text (or, with `--hex -`, hex text read from standard
/// input), else the binary contents of `file` (standard input for `-`).
pub fn octets(hex_text: Option<&str>, file: &Path) -> Result<Vec<u8>, CliError> {
    match hex_text {
        Some("-") => {
            let raw = read_all(Path::new("-"))?;
            let text = String::from_utf8_lossy(&raw);
            Ok(hex::parse(&text)?)
        }
        Some(text) => Ok(hex::parse(text)?),
        None => read_all(file),
    }
}

/// The default input path: standard input.
pub fn stdin_path() -> PathBuf {
    PathBuf::from("-")
}
