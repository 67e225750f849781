//! The fenced blocks of the README and the manual, so tests run what the documents show
//! exactly as written.

use std::path::Path;

/// A document of the repository (`README.md`, `docs/jobs.md`), read at run time.
pub fn document(path: &str) -> String {
    std::fs::read_to_string(Path::new(super::ROOT).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every fenced block of `text` as (info string, body), in order.
pub fn blocks(text: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        let fence = line.trim_start();
        match &mut current {
            None => {
                if let Some(info) = fence.strip_prefix("```") {
                    current = Some((info.trim().to_string(), String::new()));
                }
            }
            Some(_) if fence == "```" => out.push(current.take().unwrap()),
            Some((_, body)) => {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    assert!(current.is_none(), "an unclosed ``` block");
    out
}

/// The block with info string exactly `lang` whose body starts with `start`.
pub fn block(text: &str, lang: &str, start: &str) -> String {
    blocks(text)
        .into_iter()
        .find(|(info, body)| info == lang && body.starts_with(start))
        .map(|(_, body)| body)
        .unwrap_or_else(|| panic!("no ```{lang} block starting with {start:?}"))
}

/// The bodies of every block with info string exactly `lang`, in order.
pub fn bodies(text: &str, lang: &str) -> Vec<String> {
    blocks(text)
        .into_iter()
        .filter(|(info, _)| info == lang)
        .map(|(_, body)| body)
        .collect()
}
