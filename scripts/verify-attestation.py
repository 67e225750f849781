#!/usr/bin/env python3
"""Verifies an Airlock attestation with libraries nobody at Airlock wrote: securesystemslib's
DSSE envelope verification (Ed25519, via pyca/cryptography), in-toto-attestation's Statement v1
validation, and for a verification its SLSA Verification Summary v1 predicate parsed by that
project's protobuf schema.

Usage: verify-attestation.py ENVELOPE.json PUBLIC_KEY.pem
Prints one JSON object; exit 0 when the attestation holds, 1 with {"ok": false, "reason": ...}.
The key id is computed here, independently: SHA-256 of the public key's DER
(SubjectPublicKeyInfo) form.
"""
import hashlib
import json
import sys

from cryptography.hazmat.primitives import serialization
from google.protobuf import json_format
from in_toto_attestation.predicates.vsa.v1 import vsa_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

VSA = "https://slsa.dev/verification_summary/v1"


def main(envelope_path, key_path):
    pem = open(key_path, "rb").read()
    public = serialization.load_pem_public_key(pem)
    der = public.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    keyid = hashlib.sha256(der).hexdigest()
    key = SSlibKey(keyid, "ed25519", "ed25519", {"public": raw.hex()})

    envelope = Envelope.from_dict(json.load(open(envelope_path)))
    if envelope.payload_type != "application/vnd.in-toto+json":
        raise ValueError(f"payload type {envelope.payload_type!r}")
    verified = envelope.verify([key], 1)  # raises VerificationError

    payload = json.loads(envelope.payload)
    pb = json_format.Parse(json.dumps(payload), statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()
    result = None
    if payload["predicateType"] == VSA:
        predicate = dict(payload["predicate"])
        predicate.pop("airlock")  # Airlock's own extension fields
        verifier = dict(predicate["verifier"])
        verifier.pop("version", None)  # in the VSA v1 spec, not in this schema's message
        predicate["verifier"] = verifier
        # The spec makes verifiedLevels an array of strings; this schema's message has one
        # string. Checked here by hand, the rest by the schema.
        levels = predicate.pop("verifiedLevels")
        if not levels or not all(isinstance(x, str) for x in levels):
            raise ValueError(f"verifiedLevels {levels!r} is not a non-empty list of strings")
        vsa = json_format.Parse(json.dumps(predicate), vsa_pb2.VerificationSummary())
        result = vsa.verification_result
        if result not in ("PASSED", "FAILED") or not vsa.verifier.id or not vsa.policy.uri:
            raise ValueError(f"not a complete verification summary: {predicate}")
    print(
        json.dumps(
            {
                "ok": True,
                "keyid": list(verified)[0],
                "computed_keyid": keyid,
                "predicateType": payload["predicateType"],
                "verificationResult": result,
                "subject": payload["subject"],
            }
        )
    )


if __name__ == "__main__":
    try:
        main(sys.argv[1], sys.argv[2])
    except Exception as e:  # every refusal is one line, whatever raised it
        print(json.dumps({"ok": False, "reason": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
