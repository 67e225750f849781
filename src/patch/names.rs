//! The lexical layer of the patch grammar: `diff --git` name pairs, C-quoted names, `index`
//! lines, hunk headers and base85 binary lines.

use super::{PatchError, err, truncate};
use crate::domain::git::FileMode;

/// The names of a `diff --git` line, when they can be read without the rest of the section.
pub(super) enum HeaderNames {
    Pair(String, String),
    Ambiguous,
}

pub(super) fn split_header_names(s: &str) -> HeaderNames {
    // Quoted first name: read it, then the second.
    if s.starts_with('"') {
        let Some(end) = quoted_end(s) else {
            return HeaderNames::Ambiguous;
        };
        let (a, rest) = s.split_at(end);
        let Some(b) = rest.strip_prefix(' ') else {
            return HeaderNames::Ambiguous;
        };
        return pair(a, b);
    }
    // Unquoted: the usual `a/X b/X` is unambiguous even with spaces in X.
    if let Some(rest) = s.strip_prefix("a/")
        && s.len() % 2 == 1
    {
        let half = (s.len() - 1) / 2;
        // The space test comes first: only then is `half` sure to be a char boundary (a byte in
        // the middle of a multibyte character is never b' '; the fuzzer found the slice that
        // panicked when this order was the other way round).
        if s.as_bytes()[half] == b' '
            && let (a, b) = (&s[..half], &s[half + 1..])
            && b.strip_prefix("b/") == Some(&a[2..])
        {
            let _ = rest;
            return pair(a, b);
        }
    }
    // Otherwise only a single " b/" or ` "b/` split point is unambiguous.
    let splits: Vec<usize> = s
        .match_indices(" b/")
        .map(|(i, _)| i)
        .chain(s.match_indices(" \"b/").map(|(i, _)| i))
        .collect();
    match splits.as_slice() {
        [i] => pair(&s[..*i], &s[*i + 1..]),
        _ => HeaderNames::Ambiguous,
    }
}

pub(super) fn pair(a: &str, b: &str) -> HeaderNames {
    let (Ok(a), Ok(b)) = (unquote(a, 0), unquote(b, 0)) else {
        return HeaderNames::Ambiguous;
    };
    match (a.strip_prefix("a/"), b.strip_prefix("b/")) {
        (Some(a), Some(b)) => HeaderNames::Pair(a.to_string(), b.to_string()),
        _ => HeaderNames::Ambiguous,
    }
}

/// Byte index just past the closing quote of a C-quoted string at the start of `s`.
pub(super) fn quoted_end(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Decodes a name that may be C-quoted (git's `quote_c_style`: `\a \b \t \n \v \f \r \" \\`
/// and octal `\ooo` bytes). The decoded bytes must be UTF-8.
pub(super) fn unquote(s: &str, n: usize) -> Result<String, PatchError> {
    if !s.starts_with('"') {
        return Ok(s.to_string());
    }
    if quoted_end(s) != Some(s.len()) {
        return err(n, format!("{s:?} is not one quoted name"));
    }
    let inner = &s.as_bytes()[1..s.len() - 1];
    let mut out = Vec::with_capacity(inner.len());
    let mut i = 0;
    while i < inner.len() {
        let c = inner[i];
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        let Some(&e) = inner.get(i + 1) else {
            return err(n, "a quoted name ends in a backslash");
        };
        i += 2;
        let byte = match e {
            b'a' => 7,
            b'b' => 8,
            b't' => b'\t',
            b'n' => b'\n',
            b'v' => 11,
            b'f' => 12,
            b'r' => b'\r',
            b'"' => b'"',
            b'\\' => b'\\',
            b'0'..=b'3' => {
                let digits = inner
                    .get(i - 1..i + 2)
                    .filter(|d| d.iter().all(|x| (b'0'..=b'7').contains(x)));
                let Some(d) = digits else {
                    return err(n, "a bad octal escape in a quoted name");
                };
                i += 2;
                (d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0')
            }
            _ => {
                return err(
                    n,
                    format!("an unknown escape \\{} in a quoted name", e as char),
                );
            }
        };
        out.push(byte);
    }
    String::from_utf8(out).map_err(|_| PatchError {
        line: n,
        reason: "a quoted name that is not UTF-8".into(),
    })
}

/// How git would write `name` in a `Binary files` line.
#[cfg(test)]
pub(super) fn quote_if_needed(name: &str) -> String {
    let needs = name
        .bytes()
        .any(|b| b == b'"' || b == b'\\' || b < 0x20 || b == 0x7f || b >= 0x80);
    if !needs {
        return name.to_string();
    }
    let mut out = String::from("\"");
    for b in name.bytes() {
        match b {
            7 => out.push_str("\\a"),
            8 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            11 => out.push_str("\\v"),
            12 => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b if !(0x20..0x7f).contains(&b) => out.push_str(&format!("\\{b:03o}")),
            b => out.push(b as char),
        }
    }
    out.push('"');
    out
}

pub(super) fn parse_index(
    v: &str,
    n: usize,
) -> Result<(String, String, Option<FileMode>), PatchError> {
    let (ids, mode) = match v.split_once(' ') {
        Some((ids, m)) => (
            ids,
            Some(FileMode::parse(m).ok_or_else(|| PatchError {
                line: n,
                reason: format!("{m:?} is not a git file mode"),
            })?),
        ),
        None => (v, None),
    };
    let (a, b) = ids.split_once("..").ok_or_else(|| PatchError {
        line: n,
        reason: "an index line needs <old>..<new>".into(),
    })?;
    for id in [a, b] {
        let hex = id
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
        if !hex || id.len() < 4 || id.len() > 64 {
            return err(n, format!("{id:?} is not an object id"));
        }
    }
    Ok((a.to_string(), b.to_string(), mode))
}

pub(super) fn is_full_oid(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|c| c.is_ascii_hexdigit())
}

/// `@@ -os[,oc] +ns[,nc] @@[ heading]`.
pub(super) fn parse_hunk_header(line: &str, n: usize) -> Result<(u64, u64, u64, u64), PatchError> {
    let bad = || PatchError {
        line: n,
        reason: format!("{:?} is not a hunk header", truncate(line.trim_end())),
    };
    let rest = line.strip_prefix("@@ -").ok_or_else(bad)?;
    let (ranges, tail) = rest.split_once(" @@").ok_or_else(bad)?;
    if !(tail == "\n" || tail.starts_with(' ')) {
        return Err(bad());
    }
    let (old, new) = ranges.split_once(" +").ok_or_else(bad)?;
    let range = |r: &str| -> Option<(u64, u64)> {
        let num = |s: &str| {
            (!s.is_empty() && s.len() <= 12 && s.bytes().all(|c| c.is_ascii_digit()))
                .then(|| s.parse::<u64>().ok())
                .flatten()
        };
        match r.split_once(',') {
            Some((s, c)) => Some((num(s)?, num(c)?)),
            None => Some((num(r)?, 1)),
        }
    };
    let (os, oc) = range(old).ok_or_else(bad)?;
    let (ns, nc) = range(new).ok_or_else(bad)?;
    if (os == 0 && oc != 0) || (ns == 0 && nc != 0) {
        return Err(bad());
    }
    Ok((os, oc, ns, nc))
}

/// A base85 line: a length character (`A`-`Z` 1..=26, `a`-`z` 27..=52 bytes) and 5 characters
/// of git's base85 alphabet per 4 bytes.
pub(super) fn check_base85_line(line: &str, n: usize) -> Result<(), PatchError> {
    let body = line.strip_suffix('\n').ok_or_else(|| PatchError {
        line: n,
        reason: "a binary line without its newline".into(),
    })?;
    let mut chars = body.chars();
    let len = match chars.next() {
        Some(c @ 'A'..='Z') => c as usize - 'A' as usize + 1,
        Some(c @ 'a'..='z') => c as usize - 'a' as usize + 27,
        _ => return err(n, "a binary line must start with its length character"),
    };
    let data = chars.as_str();
    if data.len() != len.div_ceil(4) * 5 {
        return err(n, "a binary line's length does not match its data");
    }
    const ALPHABET: &str =
        "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~";
    if !data.chars().all(|c| ALPHABET.contains(c)) {
        return err(
            n,
            "a binary line holds a character outside git's base85 alphabet",
        );
    }
    Ok(())
}

/// A structural line without its LF: refused when it holds a carriage return (only hunk
/// content may; a CRLF header is a mangled patch).
pub(super) fn structural(line: &str, n: usize) -> Result<&str, PatchError> {
    let body = line.strip_suffix('\n').unwrap_or(line);
    if body.contains('\r') {
        return err(
            n,
            "carriage return in a header line: only hunk lines may end in CRLF",
        );
    }
    Ok(body)
}
