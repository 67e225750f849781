//! Bounded output capture: keeps the whole output when it fits in [`OUTPUT_CAP_BYTES`], otherwise
//! the first and last ~32 KiB joined by one marker line. Memory stays bounded whatever the
//! output size; bytes beyond what is kept are counted and dropped at once.

use crate::limits::{OUTPUT_CAP_BYTES, OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES};

/// The rendered, bounded output of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedOutput {
    /// Valid UTF-8, at most [`OUTPUT_CAP_BYTES`] bytes.
    pub text: String,
    /// True when `text` is not the whole output.
    pub truncated: bool,
    /// Every byte the command wrote, counted.
    pub total_bytes: u64,
}

/// Accumulates output chunks in arrival order (and hands each to a tap, when it has one).
#[derive(Debug, Default)]
pub struct OutputCapture {
    tap: Option<super::spec::OutputTap>,
    /// The first bytes, up to the whole cap.
    prefix: Vec<u8>,
    /// Bytes after the prefix; trimmed to the last `OUTPUT_TAIL_BYTES` lazily (at most twice that).
    tail: Vec<u8>,
    total: u64,
}

impl OutputCapture {
    pub fn new() -> Self {
        Self::default()
    }

    /// A capture that also hands every chunk to `tap` as it arrives.
    pub fn tapped(tap: Option<super::spec::OutputTap>) -> Self {
        OutputCapture {
            tap,
            ..Self::default()
        }
    }

    /// Adds one chunk. Cost is proportional to the bytes kept, not to `chunk.len()` beyond that.
    pub fn push(&mut self, mut chunk: &[u8]) {
        if let Some(tap) = &self.tap {
            (tap.0)(chunk);
        }
        self.total += chunk.len() as u64;
        if self.prefix.len() < OUTPUT_CAP_BYTES {
            let take = (OUTPUT_CAP_BYTES - self.prefix.len()).min(chunk.len());
            self.prefix.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        if chunk.is_empty() {
            return;
        }
        if chunk.len() >= OUTPUT_TAIL_BYTES {
            self.tail.clear();
            self.tail
                .extend_from_slice(&chunk[chunk.len() - OUTPUT_TAIL_BYTES..]);
            return;
        }
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > 2 * OUTPUT_TAIL_BYTES {
            let cut = self.tail.len() - OUTPUT_TAIL_BYTES;
            self.tail.drain(..cut);
        }
    }

    /// Total bytes seen so far.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Renders the bounded output.
    pub fn finish(self) -> CapturedOutput {
        if self.total as usize <= OUTPUT_CAP_BYTES && self.tail.is_empty() {
            let text = String::from_utf8_lossy(&self.prefix).into_owned();
            if text.len() <= OUTPUT_CAP_BYTES {
                return CapturedOutput {
                    text,
                    truncated: false,
                    total_bytes: self.total,
                };
            }
            // Invalid UTF-8 expanded past the cap: fall through to the head/tail form.
        }
        // The last OUTPUT_TAIL_BYTES of the logical stream prefix ++ tail.
        let mut last = Vec::with_capacity(OUTPUT_TAIL_BYTES);
        let from_tail = self.tail.len().min(OUTPUT_TAIL_BYTES);
        let from_prefix = OUTPUT_TAIL_BYTES - from_tail;
        let p = self.prefix.len();
        last.extend_from_slice(&self.prefix[p - from_prefix.min(p)..]);
        last.extend_from_slice(&self.tail[self.tail.len() - from_tail..]);
        let head_raw = &self.prefix[..OUTPUT_HEAD_BYTES.min(p)];
        let (head, head_used) = decode_prefix(head_raw, OUTPUT_HEAD_BYTES);
        let (tail, tail_used) = decode_suffix(&last, OUTPUT_TAIL_BYTES);
        let omitted = self.total - head_used as u64 - tail_used as u64;
        let marker = format!("\n[airlock: {omitted} bytes of output omitted]\n");
        let mut text = String::with_capacity(head.len() + marker.len() + tail.len());
        text.push_str(&head);
        text.push_str(&marker);
        text.push_str(&tail);
        debug_assert!(text.len() <= OUTPUT_CAP_BYTES);
        CapturedOutput {
            text,
            truncated: true,
            total_bytes: self.total,
        }
    }
}

/// Decodes the longest prefix of `raw` whose lossy UTF-8 rendering fits in `budget` bytes,
/// never splitting a character. Returns the text and how many raw bytes it covers.
fn decode_prefix(raw: &[u8], budget: usize) -> (String, usize) {
    let raw = trim_incomplete_end(raw);
    let mut out = String::new();
    let mut used = 0;
    for chunk in raw.utf8_chunks() {
        for ch in chunk.valid().chars() {
            if out.len() + ch.len_utf8() > budget {
                return (out, used);
            }
            out.push(ch);
            used += ch.len_utf8();
        }
        for _ in chunk.invalid() {
            if out.len() + 3 > budget {
                return (out, used);
            }
            out.push(char::REPLACEMENT_CHARACTER);
            used += 1;
        }
    }
    (out, used)
}

/// Drops a multi-byte character cut off at the end of `raw` (its lead byte present, some of its
/// continuation bytes missing), so the cut never shows up as a replacement character.
fn trim_incomplete_end(raw: &[u8]) -> &[u8] {
    let n = raw.len();
    for back in 1..=3.min(n) {
        let b = raw[n - back];
        if (b & 0xC0) == 0x80 {
            continue; // continuation byte: keep looking for the lead byte
        }
        let need = match b {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return raw,
        };
        return if back < need { &raw[..n - back] } else { raw };
    }
    raw
}

/// Decodes the longest suffix of `raw` whose lossy rendering fits in `budget` bytes, starting at a
/// character boundary. Returns the text and how many raw bytes it covers.
fn decode_suffix(raw: &[u8], budget: usize) -> (String, usize) {
    // Skip continuation bytes at the start: they belong to a character cut off in front.
    let mut start = 0;
    while start < raw.len() && start < 3 && (raw[start] & 0xC0) == 0x80 {
        start += 1;
    }
    let mut pieces: Vec<(String, usize)> = Vec::new();
    for chunk in raw[start..].utf8_chunks() {
        for ch in chunk.valid().chars() {
            pieces.push((ch.to_string(), ch.len_utf8()));
        }
        for _ in chunk.invalid() {
            pieces.push((char::REPLACEMENT_CHARACTER.to_string(), 1));
        }
    }
    let mut size = 0;
    let mut used = 0;
    let mut keep = pieces.len();
    while keep > 0 && size + pieces[keep - 1].0.len() <= budget {
        size += pieces[keep - 1].0.len();
        used += pieces[keep - 1].1;
        keep -= 1;
    }
    let text: String = pieces[keep..].iter().map(|(s, _)| s.as_str()).collect();
    (text, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(chunks: &[&[u8]]) -> CapturedOutput {
        let mut c = OutputCapture::new();
        for ch in chunks {
            c.push(ch);
        }
        c.finish()
    }

    fn omitted_from_marker(text: &str) -> u64 {
        let start = text.find("[airlock: ").expect("marker") + "[airlock: ".len();
        let end = text[start..].find(' ').unwrap() + start;
        text[start..end].parse().unwrap()
    }

    #[test]
    fn small_output_is_kept_whole() {
        let out = capture(&[b"hello ", b"world\n"]);
        assert_eq!(out.text, "hello world\n");
        assert!(!out.truncated);
        assert_eq!(out.total_bytes, 12);
    }

    #[test]
    fn empty_output() {
        let out = capture(&[]);
        assert_eq!(out.text, "");
        assert!(!out.truncated);
        assert_eq!(out.total_bytes, 0);
    }

    #[test]
    fn exactly_the_cap_is_not_truncated() {
        let data = vec![b'a'; OUTPUT_CAP_BYTES];
        let out = capture(&[&data]);
        assert!(!out.truncated);
        assert_eq!(out.text.len(), OUTPUT_CAP_BYTES);
    }

    #[test]
    fn one_byte_over_the_cap_is_truncated_with_head_and_tail() {
        let mut data = vec![b'h'; OUTPUT_CAP_BYTES + 1];
        *data.last_mut().unwrap() = b'T';
        let out = capture(&[&data]);
        assert!(out.truncated);
        assert!(out.text.len() <= OUTPUT_CAP_BYTES);
        assert!(out.text.starts_with("hhhh"));
        assert!(out.text.ends_with("hT"));
        let omitted = omitted_from_marker(&out.text);
        assert_eq!(
            omitted,
            (OUTPUT_CAP_BYTES + 1 - OUTPUT_HEAD_BYTES - OUTPUT_TAIL_BYTES) as u64
        );
    }

    #[test]
    fn one_huge_chunk() {
        let mut data = vec![b'x'; 10 * 1024 * 1024];
        data[..5].copy_from_slice(b"START");
        let n = data.len();
        data[n - 3..].copy_from_slice(b"END");
        let out = capture(&[&data]);
        assert!(out.truncated);
        assert_eq!(out.total_bytes, n as u64);
        assert!(out.text.starts_with("START"));
        assert!(out.text.ends_with("END"));
        assert!(out.text.len() <= OUTPUT_CAP_BYTES);
        assert_eq!(
            omitted_from_marker(&out.text),
            (n - OUTPUT_HEAD_BYTES - OUTPUT_TAIL_BYTES) as u64
        );
    }

    #[test]
    fn many_tiny_chunks_match_one_big_chunk() {
        let data: Vec<u8> = (0..300_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let mut c = OutputCapture::new();
        for b in &data {
            c.push(std::slice::from_ref(b));
        }
        let tiny = c.finish();
        let big = capture(&[&data]);
        assert_eq!(tiny, big);
        assert!(
            tiny.text
                .ends_with(std::str::from_utf8(&data[data.len() - 100..]).unwrap())
        );
    }

    #[test]
    fn multibyte_characters_are_never_split_at_the_cuts() {
        // 'é' is 2 bytes, '€' is 3: no alignment makes the cuts land on boundaries by luck.
        for (unit, pad) in [("é", 0usize), ("€", 0), ("€", 1), ("€", 2), ("😀", 3)] {
            let mut data = "p".repeat(pad).into_bytes();
            while data.len() < 3 * OUTPUT_CAP_BYTES {
                data.extend_from_slice(unit.as_bytes());
            }
            let out = capture(&[&data]);
            assert!(out.truncated);
            assert!(out.text.len() <= OUTPUT_CAP_BYTES);
            assert!(
                !out.text.contains(char::REPLACEMENT_CHARACTER),
                "{unit} pad {pad}"
            );
            assert!(out.text.ends_with(unit));
            let omitted = omitted_from_marker(&out.text);
            let marker_len = format!("\n[airlock: {omitted} bytes of output omitted]\n").len();
            assert_eq!(
                out.text.len() - marker_len + omitted as usize,
                data.len(),
                "every raw byte is either shown or counted as omitted"
            );
        }
    }

    #[test]
    fn invalid_utf8_stays_within_the_cap() {
        let data = vec![0xFFu8; OUTPUT_CAP_BYTES];
        let out = capture(&[&data]);
        assert!(out.text.len() <= OUTPUT_CAP_BYTES);
        assert!(
            out.truncated,
            "expansion past the cap is reported as truncation"
        );
        let out = capture(&[b"ok \xff\xfe done"]);
        assert_eq!(out.text, "ok \u{FFFD}\u{FFFD} done");
        assert!(!out.truncated);
    }

    #[test]
    fn tail_spanning_prefix_and_overflow() {
        // Slightly over the cap: the last 32 KiB come mostly from the prefix region.
        let data: Vec<u8> = (0..OUTPUT_CAP_BYTES + 10)
            .map(|i| b'0' + (i % 10) as u8)
            .collect();
        let out = capture(&[&data[..OUTPUT_CAP_BYTES - 5], &data[OUTPUT_CAP_BYTES - 5..]]);
        let expected_tail = std::str::from_utf8(&data[data.len() - OUTPUT_TAIL_BYTES..]).unwrap();
        assert!(out.text.ends_with(expected_tail));
    }
}
