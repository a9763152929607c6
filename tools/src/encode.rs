//! `rpcrdma encode`: the JSON that `decode` prints, back to octets.

use rpcrdma::wire::header::{Header, HeaderView, Limits};
use serde_json::Value;

use crate::error::{responder_says, CliError};

/// What encoding produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// The transport header followed by the payload.
    pub bytes: Vec<u8>,
    /// Why a receiver would reject these octets, if it would (the encoder writes what it
    /// is given; see [`rpcrdma::wire::header::HeaderRepr`]).
    pub warning: Option<String>,
}

/// Encodes either `decode`'s whole output (the `"header"` member is used, the rest
/// ignored) or a bare header object.
pub fn encode_json(text: &str, limits: &Limits) -> Result<Encoded, CliError> {
    let mut value: Value = serde_json::from_str(text).map_err(CliError::Json)?;
    if let Some(inner) = value.get_mut("header") {
        value = inner.take();
    }
    let header: Header = serde_json::from_value(value).map_err(CliError::Json)?;
    let bytes = header.to_bytes();
    let warning = HeaderView::parse(&bytes, limits).err().map(|e| {
        format!(
            "warning: a receiver would reject these octets: {e}; {}",
            responder_says(&e)
        )
    });
    Ok(Encoded { bytes, warning })
}
