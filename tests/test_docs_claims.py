"""The docs do not claim refusals the code no longer makes (issue 40, item 9).

Each capability of a backend has the words the docs use for it (``WORDS``). A sentence of README.md or
docs/*.md that says something is refused (``BackendError``, "refuses", "refused") for MuJoCo C, and names one of
those words, must concern a capability MuJoCo C lacks (``MUJOCO.caps``): docs/run.md once said per-world
``model_params`` were refused on MuJoCo C while ``--param`` and ``--randomize`` ran them.
"""

from __future__ import annotations

import re
from pathlib import Path

from mjharness.adapters.backends import BACKENDS, CAPABILITIES

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# capability -> the words the docs name it by
WORDS = {
    "per_world_params": ("model_params", "model parameters", "--param", "--randomize", "per-world model"),
    "extra_states": ("add_state",),
    "body_noise": ("add_body_noise",),
    "joint_noise": ("add_joint_noise", "joint noise"),
    "differentiable": ("jax.grad", "differentiation", "gradients"),
    "outputs": ("recorded outputs",),
}
REFUSAL = re.compile(r"BackendError|\brefuse[sd]?\b", re.I)
MUJOCO_C = re.compile(r"MuJoCo C|backend=\"mujoco\"|--backend mujoco|`\"mujoco\"`", re.I)


def _sentences(text: str) -> list[str]:
    """Paragraph-aware sentences: list items and paragraphs split at '. ' / line breaks between items."""
    flat = re.sub(r"\n(?!\s*[-|#]|\n)", " ", text)
    return [s for line in flat.splitlines() for s in re.split(r"(?<=[.;])\s+(?=[A-Z`])", line)]


def test_every_capability_has_words():
    assert set(WORDS) <= set(CAPABILITIES)


def test_no_page_claims_mujoco_c_refuses_what_it_runs():
    has = {cap for cap in CAPABILITIES if getattr(BACKENDS["mujoco"].caps, cap)}
    wrong = []
    for page in PAGES:
        text = page.read_text()
        # the paragraph about the MuJoCo C backend, or any sentence naming it
        for sentence in _sentences(text):
            if not REFUSAL.search(sentence) or not MUJOCO_C.search(sentence) and "Refused with" not in sentence:
                continue
            for cap in has:
                hit = [w for w in WORDS.get(cap, ()) if w in sentence]
                if hit and _refused_part(sentence, hit):
                    wrong.append(f"{page.name}: {sentence.strip()[:160]} (names {hit}, which MuJoCo C runs)")
    assert not wrong, "\n".join(wrong)


def _refused_part(sentence: str, words) -> bool:
    """Whether the sentence refuses one of ``words`` ("Refused ...: X" or "X are a BackendError")."""
    return bool(REFUSAL.search(sentence)) and any(w in sentence for w in words)


def test_the_old_claim_is_caught():
    """The check finds the sentence docs/run.md used to have."""
    old = ("own values, see below) and joint noise. Refused with a `BackendError` naming the call: `add_state`, "
           "`add_body_noise`, per-world `model_params`, differentiation.")
    hits = [s for s in _sentences(old) if REFUSAL.search(s) and _refused_part(s, WORDS["per_world_params"])]
    assert hits
    old = "`rollout`, `simulate` and `fit`. On `backend=\"mujoco\"` model parameters are a `BackendError`."
    assert [s for s in _sentences(old) if MUJOCO_C.search(s) and _refused_part(s, WORDS["per_world_params"])]
