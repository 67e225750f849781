//! Ed25519 keys: the signing key (PKCS#8 PEM, `signing_key`), public keys (SubjectPublicKeyInfo
//! PEM, `verification_keys`) and their key id, the SHA-256 of the public key's DER form.

use crate::limits;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Why a key could not be read, made or used. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} exists; a new key is never written over an old one")]
    Exists { path: PathBuf },
    #[error("{path} is larger than {max} bytes; it is not a key", max = limits::MAX_KEY_FILE_BYTES)]
    TooLarge { path: PathBuf },
    #[error(
        "{path} is readable by group or others (mode {mode:o}); a signing key must be 0600 (chmod 600 it)"
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error("{path} is not an Ed25519 {what} in PEM form: {message}")]
    Malformed {
        path: PathBuf,
        what: &'static str,
        message: String,
    },
}

/// A public key and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// Hex SHA-256 of the SubjectPublicKeyInfo DER.
    pub key_id: String,
    /// SubjectPublicKeyInfo PEM.
    pub pem: String,
    pub(super) key: ed25519_dalek::VerifyingKey,
}

impl PublicKey {
    pub(super) fn from_verifying(key: ed25519_dalek::VerifyingKey) -> PublicKey {
        let der = key
            .to_public_key_der()
            .expect("an Ed25519 public key encodes as DER");
        let pem = key
            .to_public_key_pem(LineEnding::LF)
            .expect("an Ed25519 public key encodes as PEM");
        PublicKey {
            key_id: hex::encode(Sha256::digest(der.as_bytes())),
            pem,
            key,
        }
    }

    /// Parses a SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`). A private key's PEM
    /// is accepted too, and only its public half is kept.
    pub fn from_pem(text: &str) -> Result<PublicKey, String> {
        if let Ok(k) = ed25519_dalek::VerifyingKey::from_public_key_pem(text.trim()) {
            return Ok(PublicKey::from_verifying(k));
        }
        match ed25519_dalek::SigningKey::from_pkcs8_pem(text.trim()) {
            Ok(k) => Ok(PublicKey::from_verifying(k.verifying_key())),
            Err(e) => Err(format!(
                "neither a public key (BEGIN PUBLIC KEY) nor a PKCS#8 private key: {e}"
            )),
        }
    }

    /// Reads a public key file.
    pub fn read(path: &Path) -> Result<PublicKey, KeyError> {
        let text = read_bounded(path)?;
        PublicKey::from_pem(&text).map_err(|message| KeyError::Malformed {
            path: path.to_path_buf(),
            what: "public key",
            message,
        })
    }
}

/// The private key attestations are signed with.
pub struct SigningKey {
    pub(super) key: ed25519_dalek::SigningKey,
    pub public: PublicKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("key_id", &self.public.key_id)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    fn from_dalek(key: ed25519_dalek::SigningKey) -> SigningKey {
        let public = PublicKey::from_verifying(key.verifying_key());
        SigningKey { key, public }
    }

    /// Reads a PKCS#8 PEM private key, refusing a file group or others can read.
    pub fn read(path: &Path) -> Result<SigningKey, KeyError> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Exposed {
                path: path.to_path_buf(),
                mode,
            });
        }
        let text = read_bounded(path)?;
        ed25519_dalek::SigningKey::from_pkcs8_pem(text.trim())
            .map(SigningKey::from_dalek)
            .map_err(|e| KeyError::Malformed {
                path: path.to_path_buf(),
                what: "private key (PKCS#8, BEGIN PRIVATE KEY)",
                message: e.to_string(),
            })
    }

    /// Makes a new key from the kernel's CSPRNG and writes it to `path` (mode 0600, created
    /// exclusively, fsynced with its directory). Refused when `path` exists.
    pub fn generate(path: &Path) -> Result<SigningKey, KeyError> {
        use std::os::unix::fs::OpenOptionsExt;
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut seed = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut seed))
            .map_err(io)?;
        let key = SigningKey::from_dalek(ed25519_dalek::SigningKey::from_bytes(&seed));
        seed.fill(0);
        let pem = key.to_pem();
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::AlreadyExists {
                    KeyError::Exists {
                        path: path.to_path_buf(),
                    }
                } else {
                    io(source)
                }
            })?;
        let written = f
            .write_all(pem.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io);
        if let Err(e) = written {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|source| KeyError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        Ok(key)
    }

    /// A key from a fixed seed, for tests.
    pub fn from_seed(seed: [u8; 32]) -> SigningKey {
        SigningKey::from_dalek(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// The PKCS#8 PEM of this key: version 1 (the private key alone, as `openssl genpkey
    /// -algorithm ed25519` writes it), which OpenSSL 3.0 reads; it cannot read the version 2
    /// form that also embeds the public key.
    pub fn to_pem(&self) -> String {
        ed25519_dalek::pkcs8::KeypairBytes {
            secret_key: self.key.to_bytes(),
            public_key: None,
        }
        .to_pkcs8_pem(LineEnding::LF)
        .expect("an Ed25519 key encodes as PKCS#8 PEM")
        .to_string()
    }
}

fn read_bounded(path: &Path) -> Result<String, KeyError> {
    let f = std::fs::File::open(path).map_err(|source| KeyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut text = String::new();
    f.take(limits::MAX_KEY_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if text.len() as u64 > limits::MAX_KEY_FILE_BYTES {
        return Err(KeyError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by `openssl genpkey -algorithm ed25519`; its public key and the SHA-256 of its
    /// DER as `openssl pkey -pubout -outform DER | sha256sum` printed them.
    const OPENSSL_KEY: &str = "-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIBjgoo03+uByD9jcwdJrQBiA1mCPhZHFke5cC4ImH3XL
-----END PRIVATE KEY-----
";
    const OPENSSL_PUBLIC: &str = "MCowBQYDK2VwAyEAeTWw1QfRcRcnlWS+1dqYSMDusxFWMGvwezKPEBS/5wY=";
    const OPENSSL_KEY_ID: &str = "27bedcec196f203f1c49255a7da3b6c99f4755171e6f20e996ab1fc2db314c41";

    fn write(path: &Path, text: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn an_openssl_key_reads_with_openssls_public_key_and_key_id() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k.pem");
        write(&p, OPENSSL_KEY, 0o600);
        let k = SigningKey::read(&p).unwrap();
        assert_eq!(k.public.key_id, OPENSSL_KEY_ID);
        assert!(k.public.pem.contains(OPENSSL_PUBLIC), "{}", k.public.pem);
        // Written back in the same (version 1) form openssl wrote.
        assert_eq!(k.to_pem(), OPENSSL_KEY);
    }

    #[test]
    fn generate_writes_0600_refuses_an_existing_file_and_reads_back() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k.pem");
        let k = SigningKey::generate(&p).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert_eq!(SigningKey::read(&p).unwrap().public, k.public);
        let before = std::fs::read(&p).unwrap();
        assert!(matches!(
            SigningKey::generate(&p),
            Err(KeyError::Exists { .. })
        ));
        assert_eq!(
            std::fs::read(&p).unwrap(),
            before,
            "the old key is untouched"
        );
        // Two keys are never the same.
        let other = SigningKey::generate(&d.path().join("k2.pem")).unwrap();
        assert_ne!(other.public.key_id, k.public.key_id);
    }

    #[test]
    fn exposed_malformed_oversized_and_missing_keys_are_refused_by_name() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("k.pem");
        write(&p, OPENSSL_KEY, 0o644);
        let e = SigningKey::read(&p).unwrap_err().to_string();
        assert!(e.contains("mode 644") && e.contains("k.pem"), "{e}");
        write(
            &p,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            0o600,
        );
        let e = SigningKey::read(&p).unwrap_err().to_string();
        assert!(e.contains("not an Ed25519 private key"), "{e}");
        // A public key where a private one belongs.
        let public = SigningKey::from_seed([3; 32]).public.pem;
        write(&p, &public, 0o600);
        assert!(matches!(
            SigningKey::read(&p),
            Err(KeyError::Malformed { .. })
        ));
        write(
            &p,
            &"x".repeat(limits::MAX_KEY_FILE_BYTES as usize + 1),
            0o600,
        );
        assert!(matches!(
            SigningKey::read(&p),
            Err(KeyError::TooLarge { .. })
        ));
        assert!(matches!(
            PublicKey::read(&p),
            Err(KeyError::TooLarge { .. })
        ));
        assert!(matches!(
            SigningKey::read(&d.path().join("missing.pem")),
            Err(KeyError::Io { .. })
        ));
    }
}
