//! Hexadecimal text as people paste it: `11223344 00000001`, `11:22:33:44`, `0x1122`.

/// Why a piece of text is not a run of hex octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HexError {
    /// A character that is neither a hex digit nor an accepted separator.
    #[error(
        "invalid hex: {found:?} at character {position} is not a hex digit \
         (spaces, colons and 0x prefixes are allowed)"
    )]
    BadDigit {
        /// The character.
        found: char,
        /// Its position (in characters) in the text.
        position: usize,
    },
    /// The digits do not pair up into octets.
    #[error("invalid hex: {count} digits do not make whole octets (each octet is two digits)")]
    OddDigits {
        /// How many digits there were.
        count: usize,
    },
}

fn nibble(c: char) -> Option<u8> {
    c.to_digit(16).and_then(|d| u8::try_from(d).ok())
}

fn is_separator(c: char) -> bool {
    c.is_whitespace() || c == ':' || c == ','
}

/// Parses hex text into octets. Whitespace, colons and commas separate nothing in
/// particular and are skipped; a `0x`/`0X` at the start of a separated group is skipped
/// too, so `0x11223344 0x00000001` and `11:22:33:44` both work.
pub fn parse(text: &str) -> Result<Vec<u8>, HexError> {
    let mut out = Vec::with_capacity(text.len() / 2);
    let mut high: Option<u8> = None;
    let mut count = 0usize;
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_separator(c) {
            i += 1;
            continue;
        }
        let group_start = i == 0 || is_separator(chars[i - 1]);
        if group_start && c == '0' && matches!(chars.get(i + 1), Some('x' | 'X')) {
            i += 2;
            continue;
        }
        let d = nibble(c).ok_or(HexError::BadDigit {
            found: c,
            position: i,
        })?;
        count += 1;
        match high.take() {
            Some(h) => out.push(h << 4 | d),
            None => high = Some(d),
        }
        i += 1;
    }
    if high.is_some() {
        return Err(HexError::OddDigits { count });
    }
    Ok(out)
}

/// Formats octets as lower-case hex in groups of four octets (one XDR word) separated
/// by spaces, which [`parse`] reads back.
pub fn format_words(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2 + bytes.len() / 4);
    for (i, word) in bytes.chunks(4).enumerate() {
        if i > 0 {
            out.push(' ');
        }
        for b in word {
            out.push_str(&format!("{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_and_prefixes_are_tolerated() {
        let want = vec![0x11, 0x22, 0x33, 0x44, 0, 0, 0, 1];
        assert_eq!(parse("11223344 00000001").unwrap(), want);
        assert_eq!(parse("11:22:33:44:00:00:00:01").unwrap(), want);
        assert_eq!(parse("0x11223344\n\t0X00000001\n").unwrap(), want);
        assert_eq!(parse("1122,3344, 0000 0001").unwrap(), want);
        assert_eq!(parse("").unwrap(), Vec::<u8>::new());
        assert_eq!(parse("AbCd").unwrap(), vec![0xab, 0xcd]);
    }

    #[test]
    fn bad_text_is_reported_with_its_position() {
        assert_eq!(
            parse("1122 33g4"),
            Err(HexError::BadDigit {
                found: 'g',
                position: 7
            })
        );
        assert_eq!(parse("112"), Err(HexError::OddDigits { count: 3 }));
        // "0x" only counts as a prefix at the start of a group.
        assert!(matches!(
            parse("120x"),
            Err(HexError::BadDigit { found: 'x', .. })
        ));
    }

    #[test]
    fn words_round_trip() {
        let bytes = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        let text = format_words(&bytes);
        assert_eq!(text, "01020304 05060708 09");
        assert_eq!(parse(&text).unwrap(), bytes);
        assert_eq!(format_words(&[]), "");
    }
}
