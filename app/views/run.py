"""Run: the command that reproduces a sample, and running it here when this machine has the GPUs."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import streamlit as st

from app import data, ui
from app.tables import entries
from viz import labels
from viz.safe_text import markdown_text as md  # names from trace files: text, never Markdown

st.title("Run")
with_manifest = {k: s for k, s in ui.sources().items() if s.manifest_path}
if not with_manifest:
    st.info("None of the loaded runs has a manifest.json (samples made by overlapscope's runners have one): "
            "there is no recorded command to reproduce.")
    st.stop()

chosen = [s.key for s in ui.selected() if s.key in with_manifest]
keys = list(with_manifest)
key = st.selectbox("Run to reproduce", keys, index=keys.index(chosen[0]) if chosen else 0,
                   format_func=lambda k: with_manifest[k].label, key="run_source")
src = with_manifest[key]
manifest = src.manifest() or {}

c = st.columns(4)
c[0].metric("Algorithm", str(manifest.get("algorithm", "–")))
c[1].metric("Variant", str(manifest.get("variant", "–")))
c[2].metric("Ranks", str(manifest.get("world_size", "–")))
c[3].metric("Profiler", str(manifest.get("profiler", "–")))
if manifest.get("variant_help"):
    st.caption(md(manifest["variant_help"]))
timings = manifest.get("timings_ms") or {}
if isinstance(timings, dict) and timings:
    st.markdown("**Recorded timings (ms, median of the slowest rank):** "
                + " · ".join(f"{md(labels.label(k.removesuffix('_ms')))} {float(v):.3f}" for k, v in timings.items()
                             if isinstance(v, (int, float))))
gpus = manifest.get("gpus") or []
if gpus:
    st.caption("Recorded on: " + md(", ".join(sorted({str(g) for g in gpus}))))

default_out = data.runs_root() / f"{manifest.get('algorithm', 'run')}-{manifest.get('variant', '')}-" \
                                  f"{time.strftime('%Y%m%d-%H%M%S')}"
out = st.text_input("Output folder", value=str(default_out), key="run_out")
try:
    cmd = data.reproduce_command(manifest, out)
except ValueError as exc:
    st.error(f"{md(src.label)}: cannot build a command ({md(exc)})")
    st.stop()
st.markdown("**Reproduce it** (on a host with the GPUs and torch, overlapscope installed):")
st.code(shlex.join(cmd), language="bash", wrap_lines=True)
st.caption("Then open the result: `overlapscope app OUTPUT_FOLDER`, or add the folder in the sidebar.")
with st.expander("Parameters and versions recorded in the manifest"):
    recorded = {k: manifest.get(k) for k in ("params", "dtype", "backend", "versions", "workload", "created",
                                             "timing_method") if k in manifest}
    st.dataframe(pd.DataFrame(entries(recorded), columns=["item", "value"]), hide_index=True, key="run_manifest")
    # A recorded command line names the recording machine's paths (and could carry secrets): on request only.
    if "command" in manifest and st.toggle("Show the recorded command line", key="run_show_command"):
        st.code(shlex.join(str(a) for a in manifest["command"]) if isinstance(manifest["command"], list)
                else str(manifest["command"]), language="bash", wrap_lines=True)

need = int(manifest.get("world_size") or 1)
have = data.gpu_count()
existing = data.existing_run_files(out, str(manifest.get("variant") or ""))
if existing:
    st.error(f"{md(out)} already holds a run ({md(', '.join(p.name for p in existing[:3]))}): choose another output "
             "folder (a run never overwrites another).")
elif not data.running_allowed():
    st.info("Running from the page is switched off on this server (OVERLAPSCOPE_ALLOW_RUN=0).")
elif have < need:
    st.info(f"This machine has {have} GPU(s); the run needs {need}. Run the command on a GPU host.")
elif st.button(f"Run it here on {need} of {have} GPU(s)", type="primary", key="run_go"):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(data.REPO_ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "overlapscope", *cmd[1:]]  # this app's own overlapscope
    log = st.empty()
    lines: list[str] = []
    with st.spinner("Running…"):
        proc = subprocess.Popen(cmd, cwd=data.REPO_ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip())
            log.code("\n".join(lines[-40:]))
        rc = proc.wait()
    st.session_state["run_log"] = (shlex.join(cmd), rc, "\n".join(lines[-200:]))
    if rc == 0:
        made = data.discover_samples(Path(out))
        for s in made:
            ui.add_source(data.Source(key=f"run:{s.paths[0]}", label=f"run: {s.label}", kind="run",
                                      paths=s.paths, manifest_path=s.manifest_path, group=s.group))
        st.session_state["run_made"] = len(made)
        st.rerun()  # the sidebar picks up the new run

last = st.session_state.get("run_log")
if last:
    ran, rc, text = last
    if rc == 0:
        n = st.session_state.get("run_made", 0)
        st.success(f"Done: {n} run(s) added and selected in the sidebar." if n else
                   "Done, but no manifest.json was found in the output folder.")
    else:
        st.error(f"The run failed (exit code {rc}); its outputs are kept in its output folder.")
    with st.expander("Output of the last run", expanded=rc != 0):
        st.code(f"$ {ran}\n{text}")
