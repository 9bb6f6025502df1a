"""What a cloud gives a workload in place of keys, on 127.0.0.1, for sheaf's tests.

- An OpenID Connect provider: its discovery document, its key (JWKS) and RS256 tokens it signs.
  MinIO trusts it for STS AssumeRoleWithWebIdentity (MINIO_IDENTITY_OPENID_*), as AWS trusts an
  EKS cluster's issuer for IRSA. It can keep a token file fresh, as Kubernetes keeps a projected
  service account token.
- The EC2 instance metadata service, IMDSv2 only: a session token first (PUT /latest/api/token
  with its TTL header); a read without one is refused with 401.
- A container credentials endpoint (ECS task role, EKS Pod Identity) that wants its
  Authorization token.

The credentials the last two hand out are real: MinIO's own, from AssumeRoleWithWebIdentity with a
token signed here, so the store checks every one of them (and refuses them once they expire).

Usage: python3 identity.py PORT READY_FILE
  GET  /setup?minio=URL&cred_seconds=N&container_token=T   where to get credentials
  GET  /token?seconds=N                                   a signed token
  GET  /rotate?file=PATH&seconds=N&every=S                keep PATH holding a fresh token
  GET  /role-arn                                          the role MinIO derives for the client id
  GET  /stats                                             what was asked of it, counted
"""

import base64
import hashlib
import http.server
import json
import os
import secrets
import sys
import threading
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

CLIENT_ID = "sheaf-client"
ROLE = "sheaf-test-instance-role"

port = int(sys.argv[1])
ready_file = sys.argv[2]
issuer = f"http://127.0.0.1:{port}"
key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
state = {"minio": None, "cred_seconds": 900, "container_token": None}
stats = {"tokens": 0, "imds_session": 0, "imds_refused": 0, "imds_credentials": 0, "container": 0, "container_refused": 0}
sessions = set()
lock = threading.Lock()


def b64(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def jwk():
    n = key.public_key().public_numbers()
    return {"kty": "RSA", "alg": "RS256", "use": "sig", "kid": "k1", "n": b64(n.n.to_bytes((n.n.bit_length() + 7) // 8, "big")), "e": b64(n.e.to_bytes(3, "big"))}


def token(seconds):
    now = int(time.time())
    claims = {"iss": issuer, "sub": "system:serviceaccount:db:postgres", "aud": CLIENT_ID, "azp": CLIENT_ID, "iat": now, "exp": now + seconds}
    head = b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": "k1"}).encode())
    body = b64(json.dumps(claims).encode())
    sig = key.sign(f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    with lock:
        stats["tokens"] += 1
    return f"{head}.{body}.{b64(sig)}"


def role_arn():
    # MinIO names the role of a client id in role-policy mode by the SHA-1 of the id.
    return "arn:minio:iam:::role/" + b64(hashlib.sha1(CLIENT_ID.encode()).digest())


def minio_credentials():
    """Real temporary credentials from MinIO's STS, for a token signed here."""
    form = urllib.parse.urlencode({
        "Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15", "RoleArn": role_arn(),
        "WebIdentityToken": token(state["cred_seconds"]), "DurationSeconds": str(max(900, state["cred_seconds"])),
    }).encode()
    with urllib.request.urlopen(urllib.request.Request(state["minio"], data=form, method="POST"), timeout=10) as r:
        tree = ET.fromstring(r.read())
    c = {e.tag.split("}")[-1]: e.text for e in tree.iter()}
    return {"AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"], "Token": c["SessionToken"], "Expiration": c["Expiration"]}


def rotate(path, seconds, every):
    while True:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(token(seconds))
        os.replace(tmp, path)
        time.sleep(every)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, body, ctype="text/plain"):
        b = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def count(self, what):
        with lock:
            stats[what] += 1

    def do_PUT(self):
        if self.path != "/latest/api/token":
            return self.reply(404, "")
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return self.reply(400, "X-aws-ec2-metadata-token-ttl-seconds: 1 .. 21600")
        t = secrets.token_urlsafe(32)
        with lock:
            sessions.add(t)
        self.count("imds_session")
        self.reply(200, t)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        p = url.path
        if p == "/.well-known/openid-configuration":
            doc = {"issuer": issuer, "jwks_uri": issuer + "/jwks", "authorization_endpoint": issuer + "/auth", "token_endpoint": issuer + "/token",
                   "userinfo_endpoint": issuer + "/userinfo", "response_types_supported": ["id_token"], "subject_types_supported": ["public"],
                   "id_token_signing_alg_values_supported": ["RS256"], "scopes_supported": ["openid"]}
            return self.reply(200, json.dumps(doc), "application/json")
        if p == "/jwks":
            return self.reply(200, json.dumps({"keys": [jwk()]}), "application/json")
        if p == "/setup":
            state["minio"] = q.get("minio", state["minio"])
            state["cred_seconds"] = int(q.get("cred_seconds", state["cred_seconds"]))
            state["container_token"] = q.get("container_token", state["container_token"])
            return self.reply(200, "ok")
        if p == "/token":
            return self.reply(200, token(int(q.get("seconds", "3600"))))
        if p == "/rotate":
            threading.Thread(target=rotate, args=(q["file"], int(q["seconds"]), float(q["every"])), daemon=True).start()
            return self.reply(200, "ok")
        if p == "/role-arn":
            return self.reply(200, role_arn())
        if p == "/stats":
            with lock:
                return self.reply(200, json.dumps(stats), "application/json")
        if p.startswith("/latest/meta-data/"):
            with lock:
                known = self.headers.get("X-aws-ec2-metadata-token") in sessions
            if not known:
                self.count("imds_refused")
                return self.reply(401, "")
            if p == "/latest/meta-data/iam/security-credentials/":
                return self.reply(200, ROLE)
            if p == "/latest/meta-data/iam/security-credentials/" + ROLE:
                self.count("imds_credentials")
                c = dict(minio_credentials(), Code="Success", Type="AWS-HMAC", LastUpdated=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                return self.reply(200, json.dumps(c), "application/json")
            return self.reply(404, "")
        if p == "/container/credentials":
            if self.headers.get("Authorization") != state["container_token"]:
                self.count("container_refused")
                return self.reply(401, "")
            self.count("container")
            return self.reply(200, json.dumps(minio_credentials()), "application/json")
        self.reply(404, "")


server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
with open(ready_file, "w") as f:
    f.write("ready")
server.serve_forever()
