"""Safe names made from case ids, for the places where a case id becomes part of a path.

Today that is one place: an Inspect AI ``.eval`` log is a zip whose entry for each sample is
``samples/<sample id>_epoch_<n>.json`` (inspect_ai builds the name from the sample's id, and
reads a sample back by rebuilding it), and a case id is whatever the cases file says: an id like
``../../x`` would make an entry that an unzip writes outside its folder.

A case id is its own name when it is already safe: 1-64 characters of ``[A-Za-z0-9._-]``
starting with a letter or a digit (so no ``/``, ``\\``, ``:``, NUL or control character, and no
name is ``.`` or ``..``). Any other id is named by a readable slug of it (accents dropped, each
run of other characters one ``-``, at most 40 characters; ``case`` when nothing is left), ``~``,
and the first 12 hex digits of its SHA-256. ``~`` is outside the kept alphabet, so a changed id
never takes a kept id's name; two changed ids whose 12 digits agree (only a crafted id does
that) are named with the whole digest. Distinct ids therefore get distinct names.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable

MAX_KEPT_CHARS = 64
SLUG_CHARS = 40
HASH_HEX = 12
_KEPT = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_KEPT_CHARS - 1}}}")
_OTHER = re.compile(r"[^A-Za-z0-9._-]+")
_EDGE = "._-"


def _slug(case_id: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", case_id).encode("ascii", "ignore").decode()
    slug = _OTHER.sub("-", ascii_text).strip(_EDGE)[:SLUG_CHARS].rstrip(_EDGE)
    return slug or "case"


def _changed(case_id: str, hex_digits: int) -> str:
    digest = hashlib.sha256(case_id.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{_slug(case_id)}~{digest[:hex_digits]}"


def safe_name(case_id: str, *, hash_hex: int = HASH_HEX) -> str:
    """The name of one case id: the id itself when it is safe, else ``<slug>~<hash>``."""
    if _KEPT.fullmatch(case_id):
        return case_id
    return _changed(case_id, hash_hex)


def safe_names(case_ids: Iterable[str], *, hash_hex: int = HASH_HEX) -> dict[str, str]:
    """The name of every distinct id of ``case_ids``, all distinct (see the module docstring).

    ``hash_hex`` is the digest prefix of a changed id's name (tests shorten it to make prefixes
    collide).
    """
    names = {case_id: safe_name(case_id, hash_hex=hash_hex) for case_id in dict.fromkeys(case_ids)}
    taken = Counter(names.values())
    for case_id, name in names.items():
        if taken[name] > 1:  # only changed names can collide: kept ones are distinct ids
            names[case_id] = _changed(case_id, 64)
    return names


__all__ = ["HASH_HEX", "safe_name", "safe_names"]
