//! Any bytes: the parser returns a patch or a refusal, never panics, and what it accepts
//! obeys the rules it promises (safe paths, no path twice).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(patch) = airlock::patch::parse(data) {
        let mut seen = std::collections::HashSet::new();
        for f in &patch.files {
            for p in f.paths() {
                assert!(airlock::patch::check_path(p).is_ok(), "{p:?}");
                assert!(seen.insert(p.to_string()), "{p:?} twice");
            }
        }
    }
});
