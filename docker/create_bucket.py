"""Create the bucket of the warehouse on the S3 store, once: the `s3-init` service of
docker/compose.yaml (s3a never creates buckets).

    python docker/create_bucket.py [--wait SECONDS]

Reads what the stack's other services read: TALLY_WAREHOUSE (`s3a://BUCKET/...`; the
checkpoint lives under it), TALLY_S3_ENDPOINT, TALLY_S3_REGION and the credentials
AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY. Waits for the store to answer (it may still be
starting), then creates the bucket unless it exists. Exit codes: 0 the bucket exists, 2 a bad
setting, 1 the store did not answer in time or refused.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from urllib.parse import urlparse


def bucket_of(warehouse: str) -> str:
    """`s3a://tally/warehouse` -> `tally`; ValueError for anything but an s3a:// URI."""
    parsed = urlparse(warehouse)
    if parsed.scheme != "s3a" or not parsed.netloc:
        raise ValueError(f"TALLY_WAREHOUSE: expected s3a://BUCKET/PATH, got {warehouse!r}")
    return parsed.netloc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the store")
    args = parser.parse_args(argv)
    env = os.environ
    try:
        bucket = bucket_of(env.get("TALLY_WAREHOUSE", ""))
    except ValueError as exc:
        print(f"create_bucket: {exc}", file=sys.stderr)
        return 2
    endpoint = urlparse(env.get("TALLY_S3_ENDPOINT", ""))
    if endpoint.scheme not in ("http", "https") or not endpoint.netloc:
        print("create_bucket: TALLY_S3_ENDPOINT: expected http(s)://HOST:PORT", file=sys.stderr)
        return 2
    missing = [k for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not env.get(k)]
    if missing:
        print(f"create_bucket: {', '.join(missing)} not set", file=sys.stderr)
        return 2

    from pyarrow import fs

    store = fs.S3FileSystem(
        access_key=env["AWS_ACCESS_KEY_ID"],
        secret_key=env["AWS_SECRET_ACCESS_KEY"],
        region=env.get("TALLY_S3_REGION") or env.get("AWS_REGION") or "us-east-1",
        scheme=endpoint.scheme,
        endpoint_override=endpoint.netloc,
        connect_timeout=2,
        request_timeout=10,
        allow_bucket_creation=True,
    )
    deadline = time.monotonic() + args.wait
    while True:
        try:
            if store.get_file_info(bucket).type == fs.FileType.Directory:
                print(f"create_bucket: bucket {bucket} exists")
                return 0
            store.create_dir(bucket)
            print(f"create_bucket: created bucket {bucket}")
            return 0
        except OSError as exc:
            if time.monotonic() > deadline:
                print(f"create_bucket: {endpoint.netloc}: {exc}", file=sys.stderr)
                return 1
            time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
