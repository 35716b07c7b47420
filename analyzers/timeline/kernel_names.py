"""Kernel-name normalization, so that two traces of one program compare kernel by kernel.

Why: a schedule change recompiles nothing, yet raw kernel names still differ between runs in
parts the compiler or a library heuristic chose: the vector width and block sizes in
template arguments (``vectorized_elementwise_kernel<4, ...>`` vs ``<2, ...>``), argument
lists, lambda numbering (``{lambda()#2}``, ``[lambda() (instance 2)]``), anonymous
namespaces, addresses, and the counters that code generators append
(``triton_poi_fused_add_0``). Grouping by raw name would report
those as "kernel gone / kernel new"; grouping by the normalized name reports the real
count and time changes.

Two levels:

``normalize_kernel_name(name)`` (default) keeps what identifies the work:
  - the qualified function name, without ``void``, argument lists and anonymous namespaces
    (``(anonymous namespace)`` as Kineto prints it, ``<unnamed>`` as Nsight Systems does);
  - its *type* template arguments, each reduced to its head (``CUDAFunctor_add<float>`` ->
    ``CUDAFunctor_add``; a lambda's enclosing function, e.g. ``sigmoid_kernel_cuda``), in
    order, without repeats; *literal* template arguments (numbers, booleans, enum casts)
    are dropped, since they are launch-configuration choices;
  - library kernel names as they are (``ncclDevKernel_AllGather_RING_LL`` stays distinct
    from ``ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL``; cuBLAS/CUTLASS tile sizes stay,
    because a different tile means a different algorithm was picked);
  - memcpy/memset names untouched except whitespace (their parentheses are the direction).
  Removed everywhere: hex addresses (``0x7f3a...``) and trailing ``_<digits>`` counters.

``normalize_kernel_name(name, coarse=True)`` also replaces tile shapes (``128x128x64``,
``sliced1x4``) and alignments (``align4``) by ``#``, for comparing runs whose GEMM
heuristics picked different tiles for the same operation (e.g. after a change of chunk
size); asked for, never the default, because usually the tile choice is news.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import numpy as np
import pandas as pd

from analyzers.timeline.constants import KERNEL_NAME_MODES

_WS = re.compile(r"\s+")
_ANON = re.compile(r"\(anonymous namespace\)::|`anonymous namespace'::|\{anonymous\}::|<unnamed>::")
# Lambdas as Kineto (gcc demangler: "{lambda(int)#1}") and nsys (cu++filt: "[lambda(int) (instance 1)]") print them.
_LAMBDA = re.compile(r"\{lambda\([^{}]*\)#\d+\}|\[lambda\([^\[\]]*\) \(instance \d+\)\]")
_HEX = re.compile(r"(?:_|(?<![0-9A-Za-z]))0x[0-9a-fA-F]+")  # not the "0x128" inside a tile "320x128"
_TRAILING_COUNTER = re.compile(r"(?:_\d+)+$")
_COPY_NAMES = re.compile(r"^(Memcpy|Memset|memcpy|memset)\b")
_CAST_PREFIX = re.compile(r"^\((?:[^()]*)\)\s*")
_LITERAL = re.compile(r"^[-+]?(?:\d[\w.']*|\.\d[\w.]*)$|^(?:true|false|nullptr)$")
_TILE = re.compile(r"\d+(?:x\d+)+")
_ALIGN = re.compile(r"align\d+")



def _matching(s: str, i: int, open_ch: str, close_ch: str) -> int:
    """Index of the bracket closing s[i] (an open_ch), counting both bracket kinds; -1 if unbalanced.

    Both kinds are counted so that ``<`` inside a parameter list and ``)`` inside a
    template list never end the wrong group.
    """
    depth_angle = depth_paren = 0
    for j in range(i, len(s)):
        c = s[j]
        if c == "<":
            depth_angle += 1
        elif c == ">":
            if j > 0 and s[j - 1] == "-" and depth_paren:  # "->" inside a parameter list
                continue
            depth_angle -= 1
        elif c == "(":
            depth_paren += 1
        elif c == ")":
            depth_paren -= 1
        if open_ch == "<" and c == ">" and depth_angle == 0 and depth_paren == 0:
            return j
        if open_ch == "(" and c == ")" and depth_paren == 0:
            return j
    return -1


def _split_top(s: str) -> list[str]:
    """Split a template-argument list on its top-level commas."""
    parts, depth, start = [], 0, 0
    for j, c in enumerate(s):
        if c in "<({[":
            depth += 1
        elif c in ">)}]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[start:j])
            start = j + 1
    parts.append(s[start:])
    return [p.strip() for p in parts if p.strip()]


def _head(s: str) -> str:
    """The qualified name before the first template list or parameter list (depth 0), without a
    ``void`` return type (function-template arguments, as cu++filt prints them)."""
    s = s.strip()
    if s.startswith("void "):
        s = s[5:]
    for j, c in enumerate(s):
        if c in "<(":
            return s[:j].strip()
    return s


def _is_literal(arg: str) -> bool:
    """Numbers, booleans, nullptr and enum casts such as ``(cub::BlockLoadAlgorithm)3``."""
    bare = _CAST_PREFIX.sub("", arg.strip())
    return bool(_LITERAL.match(bare))


def _without_counter(s: str) -> str:
    """'triton_poi_fused_add_0' -> 'triton_poi_fused_add'; a name that is only a counter stays."""
    return _TRAILING_COUNTER.sub("", s) or s


def _without_return_type(s: str) -> str:
    """Drop a return type written before the name (``std::enable_if<...>::type ns::kernel``)."""
    depth, cut = 0, -1
    for j, c in enumerate(s):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == " " and depth == 0:
            cut = j
    return s[cut + 1:] if cut >= 0 else s


def _normalize(name: str, coarse: bool) -> str:
    s = _WS.sub(" ", name).strip()
    if _COPY_NAMES.match(s):
        return s
    s = _LAMBDA.sub("{lambda}", _ANON.sub("", s))
    if s.startswith("void "):
        s = s[5:]
    parts: list[str] = []  # alternating plain text and reduced template lists
    i = plain_from = 0
    while i < len(s) and s[i] != "(":  # a parameter list ends the name (" const", "::{lambda}" follow it)
        if s[i] != "<":
            i += 1
            continue
        parts.append(_without_counter(s[plain_from:i]))  # kernel_1<float> -> kernel<float>
        j = _matching(s, i, "<", ">")
        if j < 0:  # a truncated name: drop the unfinished tail
            plain_from = i = len(s)
            break
        heads = [_head(a) for a in _split_top(s[i + 1:j]) if not _is_literal(a)]
        kept = list(dict.fromkeys(h for h in heads if h))
        if kept:
            parts.append("<" + ", ".join(kept) + ">")
        i = plain_from = j + 1
    parts.append(s[plain_from:i])
    s = _HEX.sub("", _without_return_type("".join(parts).strip()))
    if not s.endswith(">"):
        s = _without_counter(s)
    if coarse:
        s = _ALIGN.sub("align#", _TILE.sub("#", s))
    return s or _WS.sub(" ", name).strip()


@lru_cache(maxsize=65536)
def normalize_kernel_name(name: str, coarse: bool = False) -> str:
    """The comparable identity of a GPU activity name (see module docstring for the rules)."""
    return _normalize(name, coarse)


def normalize_names(names: Iterable[str], mode: str = "normalized") -> np.ndarray:
    """Normalize a string table once per distinct name (object array, same order).

    mode: "normalized" (default), "coarse" (tile sizes and alignments as #) or "raw" (unchanged).
    """
    if mode not in KERNEL_NAME_MODES:
        raise ValueError(f"kernel-name mode {mode!r} is not one of {', '.join(KERNEL_NAME_MODES)}")
    values = pd.Series(list(names), dtype=object)
    if mode == "raw" or values.empty:
        return values.to_numpy(dtype=object)
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    coarse = mode == "coarse"
    mapped = np.asarray([normalize_kernel_name(str(u), coarse) for u in uniques], dtype=object)
    return mapped[codes]
