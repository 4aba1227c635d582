"""Downloads from the Hugging Face Hub that fail fast, with one line saying how to fix the problem.

Everything goes through `huggingface_hub`'s own cache (HF_HOME / HF_HUB_CACHE, or a `cache_dir`), so a
file downloaded once is read from disk afterwards, also with HF_HUB_OFFLINE=1. The token comes from the
environment variable named by `token_env` (HF_TOKEN by default); without it huggingface_hub uses the token
saved by `hf auth login`, if any.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from evalpipe.core.errors import DataError

# Seconds to wait for the Hub to answer a metadata request before giving up (huggingface_hub's default is
# 10; a dead network fails at DNS long before that). Downloads themselves use HF_HUB_DOWNLOAD_TIMEOUT.
ETAG_TIMEOUT = float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or 10)


def hub_offline() -> bool:
    """HF_HUB_OFFLINE as set now (huggingface_hub reads it once at import; tests and `make` set it later)."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().lower()
    return env in {"1", "true", "yes", "on"} or bool(constants.HF_HUB_OFFLINE)


def repo_url(repo_id: str, repo_type: str | None) -> str:
    prefix = {"dataset": "datasets/", "space": "spaces/"}.get(repo_type or "", "")
    return f"https://huggingface.co/{prefix}{repo_id}"


def _explain(exc: BaseException, repo_id: str, repo_type: str | None, what: str, fix_local: str) -> str:
    from huggingface_hub import errors as hf

    url = repo_url(repo_id, repo_type)
    token_fix = f"set HF_TOKEN to a token of an account that accepted the terms on {url}"
    if isinstance(exc, hf.GatedRepoError):
        return f"{repo_id} is gated and this token has no access: {token_fix}, or {fix_local}"
    if isinstance(exc, hf.RepositoryNotFoundError):
        return (f"{repo_id} not found, or not visible without a token: check the name, {token_fix}, or {fix_local}")
    if isinstance(exc, hf.RevisionNotFoundError):
        return f"{repo_id} has no revision like the one asked for; fix 'revision', or {fix_local}"
    if isinstance(exc, (hf.RemoteEntryNotFoundError,)) or type(exc).__name__ == "EntryNotFoundError":
        return f"{repo_id} has no {what}; check the split or file name, or {fix_local}"
    if isinstance(exc, (hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled)):
        if hub_offline():
            return (f"{what} of {repo_id} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 forbids "
                    f"downloading it: run once online with HF_HUB_OFFLINE=0 and HF_TOKEN set (after accepting the "
                    f"terms on {url}), or {fix_local}")
        return (f"cannot reach the Hugging Face Hub for {what} of {repo_id} and it is not cached: check the network, "
                f"set HF_TOKEN (after accepting the terms on {url}), or {fix_local}")
    if isinstance(exc, hf.HfHubHTTPError):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"the Hugging Face Hub refused {what} of {repo_id} ({first}): {token_fix}, or {fix_local}"
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"downloading {what} of {repo_id} failed ({type(exc).__name__}: {first}); {fix_local}"


def _token(token_env: str | None) -> str | None:
    return os.environ.get(token_env or "HF_TOKEN") or None


def download_snapshot(repo_id: str, *, repo_type: str = "dataset", allow_patterns: Sequence[str] | None = None,
                      revision: str | None = None, cache_dir: str | os.PathLike | None = None,
                      token_env: str | None = "HF_TOKEN", endpoint: str | None = None, what: str = "files",
                      fix_local: str = "set 'path:' to a local copy", token: str | None = None) -> Path:
    """The local folder of (part of) a Hub repo, downloaded or taken from the cache. Raises DataError. `token`: a
    token given in Python (the GAIA lab's `hf_token=`), used for this call only, never stored; else `token_env`'s."""
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            repo_id, repo_type=repo_type, allow_patterns=list(allow_patterns) if allow_patterns else None,
            revision=revision, cache_dir=cache_dir, token=token or _token(token_env), local_files_only=hub_offline(),
            etag_timeout=ETAG_TIMEOUT, endpoint=endpoint,
        )
    except Exception as exc:  # huggingface_hub raises many kinds; each becomes one line that says what to do
        raise DataError(_explain(exc, repo_id, repo_type, what, fix_local)) from None
    return Path(folder)


def download_file(repo_id: str, filename: str, *, repo_type: str | None = "dataset", revision: str | None = None,
                  cache_dir: str | os.PathLike | None = None, token_env: str | None = "HF_TOKEN",
                  endpoint: str | None = None, fix_local: str = "download it and set 'path:' to the local file") -> Path:
    """One file of a Hub repo, downloaded or taken from the cache. Raises DataError."""
    from huggingface_hub import hf_hub_download

    try:
        local = hf_hub_download(
            repo_id, filename, repo_type=repo_type, revision=revision, cache_dir=cache_dir,
            token=_token(token_env), local_files_only=hub_offline(), etag_timeout=ETAG_TIMEOUT, endpoint=endpoint,
        )
    except Exception as exc:
        raise DataError(_explain(exc, repo_id, repo_type, f"file {filename!r}", fix_local)) from None
    return Path(local)


def parse_hf_uri(uri: str) -> tuple[str, str | None, str | None, str]:
    """`hf://datasets/owner/name[@revision]/path/in/repo` -> (repo_id, repo_type, revision, filename).

    The same addresses as huggingface_hub's HfFileSystem: `datasets/` and `spaces/` prefixes, none for models.
    """
    rest = uri[len("hf://"):] if uri.startswith("hf://") else uri
    parts = [p for p in rest.split("/") if p]
    repo_type = None
    if parts and parts[0] in ("datasets", "spaces", "models"):
        repo_type = {"datasets": "dataset", "spaces": "space", "models": None}[parts[0]]
        parts = parts[1:]
    if len(parts) < 3:
        raise DataError(f"{uri}: expected hf://datasets/<owner>/<name>[@revision]/<file>, e.g. "
                        f"hf://datasets/openai/gsm8k/main/test-00000-of-00001.parquet")
    name, _, revision = parts[1].partition("@")
    return f"{parts[0]}/{name}", repo_type, (revision or None), "/".join(parts[2:])
