//! The seal a clean close leaves beside the cache's image: what lets the next process trust the
//! entries its writer trusted without reading their bytes again.
//!
//! An entry found at open is otherwise verified byte by byte ([`super::content`]), since a raw
//! write to the image while no cache was open changes what no stat shows. That reads the whole
//! tree once per process, which a one-shot `airlock run` pays on every run. A seal stands in for
//! it when it proves the image file has not been written since a process that trusted those
//! entries unmounted it:
//! - [`write`] runs only once the image is unmounted. It records the image file's stamp (inode,
//!   size, mtime and ctime to the nanosecond), taken at least [`margin`] after the image last
//!   changed, the boot id, and the keys of the entries the closing process trusted (filled by it,
//!   verified by it, or trusted through the seal it opened with);
//! - [`take`] runs before the image is mounted (a mount writes the image's superblock, so a seal
//!   never outlives the mount after it): it reads the seal, removes it, and honours it only when
//!   the image is not mounted, the boot is the same and the image's stamp is exactly the seal's.
//!
//! Every write to the image file, directly or through a loop device, moves its ctime, which no
//! user can set back (short of setting the system clock back). The margin keeps a write within
//! the same clock tick as the stamp from going unseen (git's "racy" rule; timestamps come from
//! the kernel's coarse clock). A process that dies without closing leaves no seal (the one it
//! opened with is gone), so its successor verifies every entry it uses.
//!
//! Not covered: writes beneath the data dir's filesystem (to its block device), and a seal forged
//! by someone who can write the data dir (who could as well rewrite its database).

use crate::limits;
use crate::staging::StatKey;
use sha2::Digest;
use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// The seal's file beside the image.
pub(super) const SEAL: &str = "seal";
const HEADER: &str = "airlock-tree-cache-seal 1";

/// Largest seal read back (a key is about 90 bytes; the cache holds far fewer entries).
const MAX_SEAL_BYTES: u64 = 4 << 20;

/// How long after the image's last change its stamp must be taken: [`limits::TREE_CACHE_SEAL_TICKS`]
/// ticks of the kernel's coarse clock (file timestamps come from it), and one millisecond more.
pub(super) fn margin() -> Duration {
    let tick = nix::time::clock_getres(nix::time::ClockId::CLOCK_REALTIME_COARSE)
        .map(Duration::from)
        .unwrap_or(limits::REF_CACHE_RACY_MARGIN);
    tick * limits::TREE_CACHE_SEAL_TICKS + Duration::from_millis(1)
}

fn nanos(t: SystemTime) -> i128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Whole-second timestamps (both times end in nine zeros) say the filesystem keeps no finer
/// ones: a write in the same second would not move them, so no seal is written.
fn coarse(s: &StatKey) -> bool {
    s.mtime_ns % 1_000_000_000 == 0 && s.ctime_ns % 1_000_000_000 == 0
}

fn last_change(s: &StatKey) -> i128 {
    s.mtime_ns.max(s.ctime_ns)
}

/// Seals the unmounted `image` with the entries `keys`: waits until its stamp is [`margin`]
/// older than now, then writes `dir/seal` (a temporary file renamed into place). `Ok(false)` when the filesystem's timestamps are too coarse to seal by.
pub(super) fn write<'a>(
    dir: &Path,
    image: &Path,
    boot: &str,
    keys: impl Iterator<Item = &'a str>,
) -> std::io::Result<bool> {
    use std::io::Write;
    if boot.is_empty() {
        return Ok(false);
    }
    let margin = margin();
    let mut attempts = 0;
    let (stamp, sealed) = loop {
        let stamp = crate::staging::stat_key(image).ok_or(std::io::ErrorKind::NotFound)?;
        if coarse(&stamp) {
            return Ok(false);
        }
        let now = nanos(SystemTime::now());
        let age = now - last_change(&stamp);
        if age >= margin.as_nanos() as i128 {
            break (stamp, now);
        }
        attempts += 1;
        if attempts > limits::TREE_CACHE_SEAL_ATTEMPTS {
            // The image keeps changing: no seal, and the next open verifies.
            return Ok(false);
        }
        std::thread::sleep(Duration::from_nanos(
            (margin.as_nanos() as i128 - age.max(0)) as u64,
        ));
    };
    let mut body = format!(
        "{HEADER}\nboot {boot}\nimage {} {} {} {}\nsealed {sealed}\n",
        stamp.ino, stamp.size, stamp.mtime_ns, stamp.ctime_ns
    );
    for key in keys {
        body.push_str("entry ");
        body.push_str(key);
        body.push('\n');
    }
    let digest = hex::encode(sha2::Sha256::digest(body.as_bytes()));
    body.push_str(&format!("sha256 {digest}\n"));
    // Not fsynced: a seal only stands within the boot that wrote it, and a crash is a new
    // boot (whose open discards the image anyway). The rename keeps a reader from seeing half.
    let tmp = dir.join(format!("{SEAL}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(body.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, dir.join(SEAL))?;
    Ok(true)
}

/// Takes the seal beside `image` (it is removed whatever it says) and returns the keys it
/// vouches for, or why it vouches for none. `mounted`: whether the image is mounted now (a
/// mount left by a process that did not close may have been written since).
pub(super) fn take(
    dir: &Path,
    image: &Path,
    boot: &str,
    mounted: bool,
) -> Result<HashSet<String>, String> {
    use std::io::Read;
    let path = dir.join(SEAL);
    let mut body = Vec::new();
    let read = std::fs::File::open(&path).and_then(|f| {
        f.take(MAX_SEAL_BYTES + 1)
            .read_to_end(&mut body)
            .map(|_| ())
    });
    match read {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("no seal (the last process did not close the cache)".into());
        }
        Err(e) => return Err(format!("reading the seal: {e}")),
    }
    if let Err(e) = std::fs::remove_file(&path) {
        return Err(format!("removing the seal: {e}"));
    }
    let now = crate::staging::stat_key(image);
    judge(&body, now.as_ref(), boot, mounted, margin())
}

/// Whether seal `body` vouches for the image as it is now (`now`, its stamp; `None` when it is
/// missing): the keys it vouches for, or why not.
fn judge(
    body: &[u8],
    now: Option<&StatKey>,
    boot: &str,
    mounted: bool,
    margin: Duration,
) -> Result<HashSet<String>, String> {
    if body.len() as u64 > MAX_SEAL_BYTES {
        return Err(format!("the seal is over {MAX_SEAL_BYTES} bytes"));
    }
    let text = std::str::from_utf8(body).map_err(|_| "the seal is not UTF-8")?;
    let (content, trailer) = text
        .trim_end_matches('\n')
        .rsplit_once('\n')
        .ok_or("the seal has no checksum")?;
    let content = &text[..content.len() + 1];
    if trailer
        != format!(
            "sha256 {}",
            hex::encode(sha2::Sha256::digest(content.as_bytes()))
        )
    {
        return Err("the seal's checksum does not match".into());
    }
    let mut lines = content.lines();
    if lines.next() != Some(HEADER) {
        return Err("the seal's header is unknown".into());
    }
    fn field<'a>(l: Option<&'a str>, name: &str) -> Result<&'a str, String> {
        l.and_then(|l| l.strip_prefix(name))
            .ok_or(format!("the seal has no {name:?} line"))
    }
    let sealed_boot = field(lines.next(), "boot ")?;
    let image = field(lines.next(), "image ")?;
    let sealed_at: i128 = field(lines.next(), "sealed ")?
        .parse()
        .map_err(|_| "the seal's time is not a number")?;
    if boot.is_empty() || sealed_boot != boot {
        return Err("the seal is from another boot".into());
    }
    if mounted {
        return Err("the image is mounted (a process left it so)".into());
    }
    let n: Vec<i128> = image
        .split(' ')
        .map(|v| v.parse::<i128>())
        .collect::<Result<_, _>>()
        .map_err(|_| "the seal's image stamp is not numbers")?;
    let [ino, size, mtime_ns, ctime_ns] = n[..] else {
        return Err("the seal's image stamp has the wrong fields".into());
    };
    let Some(now) = now else {
        return Err("the image is missing".into());
    };
    if (
        now.ino as i128,
        now.size as i128,
        now.mtime_ns,
        now.ctime_ns,
    ) != (ino, size, mtime_ns, ctime_ns)
    {
        return Err("the image was written after the seal".into());
    }
    if coarse(now) || sealed_at - last_change(now) < margin.as_nanos() as i128 {
        return Err("the seal was taken too soon after the image's last change".into());
    }
    lines
        .map(|l| {
            l.strip_prefix("entry ")
                .filter(|k| !k.is_empty() && !k.contains('/'))
                .map(str::to_string)
                .ok_or(format!("the seal has an unknown line {l:?}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(ino: u64, ctime_ns: i128) -> StatKey {
        StatKey {
            ino,
            size: 4096,
            mtime_ns: ctime_ns - 5,
            ctime_ns,
            mode: 0o100600,
        }
    }

    fn body(boot: &str, s: &StatKey, sealed: i128, keys: &[&str]) -> Vec<u8> {
        let mut b = format!(
            "{HEADER}\nboot {boot}\nimage {} {} {} {}\nsealed {sealed}\n",
            s.ino, s.size, s.mtime_ns, s.ctime_ns
        );
        for k in keys {
            b.push_str(&format!("entry {k}\n"));
        }
        let d = hex::encode(sha2::Sha256::digest(b.as_bytes()));
        b.push_str(&format!("sha256 {d}\n"));
        b.into_bytes()
    }

    #[test]
    fn a_seal_vouches_only_for_the_same_image_boot_and_an_old_enough_stamp() {
        let m = Duration::from_millis(9);
        let s = stamp(12, 1_700_000_000_123_456_789);
        let later = s.ctime_ns + m.as_nanos() as i128;
        let good = body("b1", &s, later, &["k1", "k2"]);
        let keys = judge(&good, Some(&s), "b1", false, m).unwrap();
        assert_eq!(keys, HashSet::from(["k1".to_string(), "k2".to_string()]));
        // No entries is a seal too.
        assert!(
            judge(&body("b1", &s, later, &[]), Some(&s), "b1", false, m)
                .unwrap()
                .is_empty()
        );

        let refused = |b: &[u8], now: Option<&StatKey>, boot: &str, mounted: bool, why: &str| {
            let e = judge(b, now, boot, mounted, m).unwrap_err();
            assert!(e.contains(why), "{e:?} does not say {why:?}");
        };
        refused(&good, Some(&s), "b2", false, "another boot");
        refused(&good, Some(&s), "", false, "another boot");
        refused(&good, Some(&s), "b1", true, "mounted");
        refused(&good, None, "b1", false, "missing");
        for moved in [
            stamp(13, s.ctime_ns),
            stamp(12, s.ctime_ns + 1),
            StatKey {
                size: 8192,
                ..s.clone()
            },
            StatKey {
                mtime_ns: s.mtime_ns + 1,
                ..s.clone()
            },
        ] {
            refused(&good, Some(&moved), "b1", false, "written after the seal");
        }
        // Racy: sealed within the margin of the last change.
        refused(
            &body("b1", &s, later - 1, &["k1"]),
            Some(&s),
            "b1",
            false,
            "too soon",
        );
        // Whole-second timestamps.
        let whole = StatKey {
            mtime_ns: 1_700_000_000_000_000_000,
            ctime_ns: 1_700_000_000_000_000_000,
            ..s.clone()
        };
        refused(
            &body("b1", &whole, whole.ctime_ns + 10_000_000_000, &["k1"]),
            Some(&whole),
            "b1",
            false,
            "too soon",
        );
        // Any byte changed: the checksum refuses it.
        for i in 0..good.len() - 1 {
            let mut b = good.clone();
            b[i] ^= 0x20;
            assert!(judge(&b, Some(&s), "b1", false, m).is_err(), "byte {i}");
        }
        // A key that could name a path elsewhere, and a line of no known kind.
        refused(
            &body("b1", &s, later, &["../x"]),
            Some(&s),
            "b1",
            false,
            "unknown line",
        );
        let mut odd = String::from_utf8(body("b1", &s, later, &["k1"])).unwrap();
        odd = odd.replace("entry k1", "entri k1");
        let (head, _) = odd.trim_end().rsplit_once('\n').unwrap();
        let head = format!("{head}\n");
        let d = hex::encode(sha2::Sha256::digest(head.as_bytes()));
        refused(
            format!("{head}sha256 {d}\n").as_bytes(),
            Some(&s),
            "b1",
            false,
            "unknown line",
        );
    }
}
