//! Canonical JSON: compact, object keys sorted at every depth. Digests of request parameters,
//! artifact bodies and environment specs are taken over this form, so equal values always hash
//! equally.
//!
//! The keys are sorted here explicitly rather than relying on serde_json's map order: that order
//! is a crate feature (`preserve_order`) that any dependency in the build could turn on.

use serde::Serialize;
use serde_json::Value;

/// SHA-256 of bytes, as lowercase hex: the form every digest Airlock records takes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The canonical text of any serializable value.
pub fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    let v = serde_json::to_value(value).expect("a value for canonical JSON serializes");
    let mut out = String::new();
    write(&v, &mut out);
    out
}

fn write(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).expect("a string serializes"));
                out.push(':');
                write(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(x, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&serde_json::to_string(scalar).expect("a scalar serializes")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sorted_at_every_depth_and_arrays_keep_their_order() {
        #[derive(Serialize)]
        struct Inner {
            zeta: u8,
            alpha: &'static str,
        }
        #[derive(Serialize)]
        struct Outer {
            b: Vec<Inner>,
            a: Option<u8>,
            c: serde_json::Value,
        }
        let v = Outer {
            b: vec![
                Inner {
                    zeta: 2,
                    alpha: "é\"",
                },
                Inner {
                    zeta: 1,
                    alpha: "x",
                },
            ],
            a: None,
            c: serde_json::json!({"y": [3, 1], "x": {"q": true, "p": 1.5}}),
        };
        assert_eq!(
            to_string(&v),
            r#"{"a":null,"b":[{"alpha":"é\"","zeta":2},{"alpha":"x","zeta":1}],"c":{"x":{"p":1.5,"q":true},"y":[3,1]}}"#
        );
    }
}
