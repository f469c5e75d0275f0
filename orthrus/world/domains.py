"""Twelve tiny synthetic domains mirroring the study's evaluation domains.

Every generator is a pure function of a `random.Random` and returns `(prompt, answer)`,
plain ASCII text. Each domain states its own uncertainty (`UNCERTAINTY`): how much of the
answer the prompt determines. Where the world is open it samples uniformly among equally good
continuations, so a teacher trained on it meets near-ties there, at which reduced precision
can flip a greedy choice (as a real model does in stories and verse, rarely in arithmetic).

- determined: math (worked sums), code-ru (templated Python): the predictable domains;
- mixed: math-ru (worked sums), gec-en, gec-ru (templated grammar correction), qa-ru (key-value
  record lookup), qa (the looked-up facts are determined; three prompts in four ask an open
  question whose answer adds free hearsay sentences and phrases around the facts), code (real
  functions from the Python standard library, too many to memorise), wmt-ru-en (word-by-word
  translation from an invented language with re-ordering; some adjectives have two equally good
  English renderings); each of their prompts also asks for a story, told after the determined
  answer: a new one (`REMARK_SHARE`) or an old tale of the same length (`_remark`);
- open: creative-en (stories from a random grammar: nearly every word is a free choice among
  a few equally good ones), poetry-en, poetry-ru (rhyming verse from random word choices). Half
  of their prompts (`KNOWN_SHARE`) ask instead for a known text (one of `KNOWN_TEXTS` fixed
  fables or rhymes, as long as a new one), which is determined: the perplexity of the reference
  then varies within a domain as it does for a real model, between memorised and composed text.

The "-ru" domains use an invented language ("Ruvian") written in ASCII so the byte
vocabulary stays small. The words and templates, and each domain's uncertainty, are data
(orthrus/world/domains.yaml); the generators here compose them. Nothing here touches the
network; `code` reads the local standard library sources (a fixed module list, deterministic
selection).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import yaml

from orthrus.world.code import code_en, code_ru

# the words and templates the generators draw from, and each domain's uncertainty: data
_WORLD = yaml.safe_load(Path(__file__).with_suffix(".yaml").read_text(encoding="utf-8"))

# How much of the answer the prompt determines (see the module docstring); the study's
# uncertainty table reports it.
UNCERTAINTY: dict[str, str] = _WORLD["uncertainty"]
DOMAINS: list[str] = list(UNCERTAINTY)

EN_NOUNS, EN_VERBS, EN_ADJ, EN_PLACES, EN_TIMES, EN_SYNONYMS = (
    _WORLD["english"][k] for k in ("nouns", "verbs", "adjectives", "places", "times", "synonyms")
)
_EN_VERB_FORMS = {v[0]: v for v in EN_VERBS}
# Ruvian: the invented language, Ruvian -> English
RU_NOUNS, RU_VERBS, RU_ADJ, RU_NUM_WORD = (
    _WORLD["ruvian"][k] for k in ("nouns", "verbs", "adjectives", "number_words")
)

# --------------------------------------------------------------------------- math


def _math_steps(rng: random.Random, n_terms: int):
    terms = [rng.randint(1, 9) for _ in range(n_terms)]
    ops = [rng.choice("+-") if i else "+" for i in range(n_terms)]
    # keep the running total non-negative and small
    total = terms[0]
    steps = []
    for op, t in zip(ops[1:], terms[1:]):
        if op == "-" and total - t < 0:
            op = "+"
        new = total + t if op == "+" else total - t
        steps.append((total, op, t, new))
        total = new
    expr = str(terms[0]) + "".join(f" {s[1]} {s[2]}" for s in steps)
    return expr, steps, total


def math_en(rng: random.Random) -> tuple[str, str]:
    expr, steps, total = _math_steps(rng, rng.randint(3, 5))
    prompt = f"Compute {expr}. Show the steps."
    lines = [f"Step {i + 1}: {a} {op} {b} = {c}." for i, (a, op, b, c) in enumerate(steps)]
    answer = " ".join(lines) + f" The answer is {total}."
    return prompt, answer


def math_ru(rng: random.Random) -> tuple[str, str]:
    expr, steps, total = _math_steps(rng, rng.randint(3, 5))
    w = RU_NUM_WORD
    expr_ru = expr.replace("+", w["plus"]).replace("-", w["minus"])
    prompt = f"Shitaj {expr_ru}. Pokazhi shagi."
    lines = []
    for i, (a, op, b, c) in enumerate(steps):
        opw = w["plus"] if op == "+" else w["minus"]
        lines.append(f"{w['step'].capitalize()} {i + 1}: {a} {opw} {b} {w['equals']} {c}.")
    answer = " ".join(lines) + f" {w['answer'].capitalize()} {w['is']} {total}."
    return prompt, answer


# --------------------------------------------------------------------------- qa

QA_KEYS, QA_VALS, QA_VALS_RU = (_WORLD["qa"][k] for k in ("keys", "values", "values_ru"))
_QA_OPENERS, _QA_CLOSERS, _QA_HEARSAY = (_WORLD["qa"][k] for k in ("openers", "closers", "hearsay"))


def _records(rng: random.Random, vals: list[str]):
    keys = rng.sample(QA_KEYS, rng.randint(3, 5))
    recs = [(k, rng.choice(vals), rng.randint(10, 99)) for k in keys]
    return recs


def _hearsay(rng: random.Random, k: str) -> str:
    """A free sentence about `k` from the story grammar: words the records do not determine."""
    return (
        f"{rng.choice(_QA_HEARSAY)} {k} {rng.choice(_STORY_VERBS)} {rng.choice(['a', 'the'])} "
        f"{rng.choice(EN_ADJ)} {rng.choice(EN_NOUNS)} {rng.choice(EN_PLACES)}."
    )


def qa_en(rng: random.Random) -> tuple[str, str]:
    recs = _records(rng, QA_VALS)
    k, color, age = rng.choice(recs)
    table = "; ".join(f"{a} {b} {c}" for a, b, c in recs)
    core = f"The record for {k} says the color is {color} and the age is {age}."
    if rng.random() < 0.75:  # an open question: free words around the determined facts
        prompt = f"Records (name color age): {table}. Tell me about {k}."
        chat = [_hearsay(rng, k) for _ in range(rng.randint(1, 2))]
        answer = " ".join(
            [rng.choice(_QA_OPENERS), core, *chat, rng.choice(_QA_CLOSERS).format(k=k, color=color, age=age)]
        )
    else:  # a plain lookup: the facts only
        prompt = f"Records (name color age): {table}. Look up {k}."
        answer = core
    return prompt, answer


def qa_ru(rng: random.Random) -> tuple[str, str]:
    recs = _records(rng, QA_VALS_RU)
    k, color, age = rng.choice(recs)
    table = "; ".join(f"{a} {b} {c}" for a, b, c in recs)
    prompt = f"Zapisi (imja cvet let): {table}. Skazhi pro {k}."
    answer = f"Zapis pro {k} govorit cvet {color} i let {age}. Znachit {k} est {color} i {age} let."
    return prompt, answer


# --------------------------------------------------------------------------- gec


def _en_sentence(rng: random.Random):
    subj = rng.choice(EN_NOUNS)
    obj = rng.choice([n for n in EN_NOUNS if n != subj])
    adj = rng.choice(EN_ADJ)
    base, third, past = rng.choice(EN_VERBS)
    time = rng.choice(EN_TIMES)
    place = rng.choice(EN_PLACES)
    verb = past if time == "yesterday" else third
    correct = f"The {adj} {subj} {verb} the {obj} {place} {time}."
    # one error per sentence
    kind = rng.randrange(4)
    if kind == 0:  # agreement / tense
        wrong_verb = base
        wrong = f"the {adj} {subj} {wrong_verb} the {obj} {place} {time}."
    elif kind == 1:  # missing article
        wrong = f"the {adj} {subj} {verb} {obj} {place} {time}."
    elif kind == 2:  # a / an misuse
        wrong = f"the {adj} {subj} {verb} a the {obj} {place} {time}."
    else:  # missing full stop, lowercase
        wrong = f"the {adj} {subj} {verb} the {obj} {place} {time}"
    return wrong, correct


def gec_en(rng: random.Random) -> tuple[str, str]:
    pairs = [_en_sentence(rng) for _ in range(2)]
    prompt = "Correct the grammar: " + " ".join(w for w, _ in pairs)
    answer = "Corrected: " + " ".join(c for _, c in pairs)
    return prompt, answer


def _ru_sentence(rng: random.Random):
    # Ruvian grammar: Subject-Object-Verb; verb takes suffix -t in present and -l in past;
    # adjective before noun ends like the noun (-a / -o).
    subj = rng.choice(list(RU_NOUNS))
    obj = rng.choice([n for n in RU_NOUNS if n != subj])
    adj = rng.choice(list(RU_ADJ))
    verb = rng.choice(list(RU_VERBS))
    past = rng.random() < 0.5
    time = "vchera" if past else "sejchas"
    vform = verb + ("l" if past else "t")
    adj_ok = adj[:-1] + subj[-1] if adj[-1] in "ao" else adj
    correct = f"{adj_ok.capitalize()} {subj} {obj}u {vform} {time}."
    kind = rng.randrange(3)
    if kind == 0:  # wrong tense suffix
        wrong = f"{adj_ok} {subj} {obj}u {verb + ('t' if past else 'l')} {time}."
    elif kind == 1:  # missing object case
        wrong = f"{adj_ok} {subj} {obj} {vform} {time}."
    else:  # bare verb
        wrong = f"{adj_ok} {subj} {obj}u {verb} {time}."
    return wrong, correct


def gec_ru(rng: random.Random) -> tuple[str, str]:
    pairs = [_ru_sentence(rng) for _ in range(2)]
    prompt = "Ispravi grammatiku: " + " ".join(w for w, _ in pairs)
    answer = "Ispravleno: " + " ".join(c for _, c in pairs)
    return prompt, answer


# --------------------------------------------------------------------------- translation


def wmt_ru_en(rng: random.Random) -> tuple[str, str]:
    """Ruvian (SOV, adjective after noun) -> English (SVO); some adjectives have synonyms."""
    ru, en = [], []
    for _ in range(2):
        subj, obj = rng.sample(list(RU_NOUNS), 2)
        verb = rng.choice(list(RU_VERBS))
        adj = rng.choice(list(RU_ADJ))
        past = rng.random() < 0.5
        ru.append(f"{subj.capitalize()} {adj} {obj}u {verb}{'l' if past else 't'}.")
        forms = _EN_VERB_FORMS[RU_VERBS[verb]]
        en_adj = rng.choice(EN_SYNONYMS.get(RU_ADJ[adj], [RU_ADJ[adj]]))
        en.append(f"The {en_adj} {RU_NOUNS[subj]} {forms[2] if past else forms[1]} the {RU_NOUNS[obj]}.")
    prompt = "Translate from Ruvian to English: " + " ".join(ru)
    return prompt, " ".join(en)


# --------------------------------------------------------------------------- creative

_STORY_OPENERS, _STORY_LINKS, _STORY_VERBS, _STORY_ENDINGS, _THEMES = (
    _WORLD["story"][k] for k in ("openers", "links", "verbs", "endings", "themes")
)
# Share of the open domains' prompts that ask for a known text (determined) instead of a new one,
# and how many known texts each open domain has: few enough that the teacher learns them by heart.
KNOWN_SHARE = 0.5
KNOWN_TEXTS = 3
# A story's events and a poem's stanzas: open texts long enough that a greedy response meets
# dozens of free choices (the study's divergences grow with them), short enough to fit the
# default study's token budget (decode.max_new_tokens) whole. Known and new texts have the same
# length, so that within a domain the reference's perplexity, not its length, tells them apart.
STORY_EVENTS = 14
POEM_STANZAS = 6


def _story(rng: random.Random, hero_adj: str, hero: str, n_events: int) -> str:
    sents = [f"{rng.choice(_STORY_OPENERS)}, there {rng.choice(['was', 'lived'])} a {hero_adj} {hero}."]
    for _ in range(n_events):
        sents.append(
            f"{rng.choice(_STORY_LINKS)} the {hero} {rng.choice(_STORY_VERBS)} "
            f"{rng.choice(['a', 'the'])} {rng.choice(EN_ADJ)} {rng.choice(EN_NOUNS)} "
            f"{rng.choice(EN_PLACES)}."
        )
    sents.append(f"In the end the {hero} went home {rng.choice(_STORY_ENDINGS)}")
    return " ".join(sents)


def creative_en(rng: random.Random) -> tuple[str, str]:
    if rng.random() < KNOWN_SHARE:  # a story everyone knows: one fixed text per theme, determined
        theme = rng.choice(_THEMES[:KNOWN_TEXTS])
        fixed = random.Random(f"fable|{theme}")
        adj, hero = fixed.choice(EN_ADJ), fixed.choice(EN_NOUNS)
        return (f"Tell the old fable about {theme}.", _story(fixed, adj, hero, STORY_EVENTS))
    theme, hero_adj, hero = rng.choice(_THEMES), rng.choice(EN_ADJ), rng.choice(EN_NOUNS)
    prompt = f"Write a new story about a {hero_adj} {hero} and {theme}."
    return prompt, _story(rng, hero_adj, hero, STORY_EVENTS)


# --------------------------------------------------------------------------- poetry

_RHYMES_EN, _LINES_EN, _POEM_TOPICS_EN = (_WORLD["poetry_en"][k] for k in ("rhymes", "lines", "topics"))
_RHYMES_RU, _LINES_RU, _POEM_TOPICS_RU = (_WORLD["poetry_ru"][k] for k in ("rhymes", "lines", "topics"))


def _poem(rng, rhymes, lines, nouns, adjs, stanzas: int = POEM_STANZAS) -> str:
    out = []
    for _ in range(stanzas):
        scheme = rng.choice(["AABB", "ABAB", "ABBA"])
        groups = rng.sample(rhymes, 2)
        words = {"A": rng.sample(groups[0], 2), "B": rng.sample(groups[1], 2)}
        for letter in scheme:
            w = words[letter].pop()
            line = rng.choice(lines).format(adj=rng.choice(adjs), noun=rng.choice(nouns), w=w)
            out.append(line[0].upper() + line[1:] + ",")
    out[-1] = out[-1][:-1] + "."
    return "\n".join(out)


def poetry_en(rng: random.Random) -> tuple[str, str]:
    if rng.random() < KNOWN_SHARE:  # a poem everyone knows: one fixed text per topic, determined
        topic = rng.choice(_POEM_TOPICS_EN[:KNOWN_TEXTS])
        return (
            f"Recite the old rhyme about {topic}.",
            _poem(random.Random(f"rhyme|{topic}"), _RHYMES_EN, _LINES_EN, EN_NOUNS, EN_ADJ),
        )
    topic = rng.choice(_POEM_TOPICS_EN)
    prompt = f"Write a new rhyming poem about {topic} and a {rng.choice(EN_ADJ)} {rng.choice(EN_NOUNS)}."
    return prompt, _poem(rng, _RHYMES_EN, _LINES_EN, EN_NOUNS, EN_ADJ)


def poetry_ru(rng: random.Random) -> tuple[str, str]:
    nouns, adjs = list(RU_NOUNS), list(RU_ADJ)
    if rng.random() < KNOWN_SHARE:
        topic = rng.choice(_POEM_TOPICS_RU[:KNOWN_TEXTS])
        return (
            f"Prochitaj staryj stih pro {topic}.",
            _poem(random.Random(f"stih|{topic}"), _RHYMES_RU, _LINES_RU, nouns, adjs),
        )
    topic = rng.choice(_POEM_TOPICS_RU)
    prompt = f"Napishi novyj stih pro {topic} i {rng.choice(list(RU_ADJ))} {rng.choice(list(RU_NOUNS))}."
    return prompt, _poem(rng, _RHYMES_RU, _LINES_RU, nouns, adjs)


# --------------------------------------------------------------------------- registry

GENERATORS: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "code": code_en,
    "code-ru": code_ru,
    "creative-en": creative_en,
    "gec-en": gec_en,
    "gec-ru": gec_ru,
    "math": math_en,
    "math-ru": math_ru,
    "poetry-en": poetry_en,
    "poetry-ru": poetry_ru,
    "qa": qa_en,
    "qa-ru": qa_ru,
    "wmt-ru-en": wmt_ru_en,
}
assert list(GENERATORS) == DOMAINS

# The mixed domains' told stories: every prompt of theirs also asks for a story, told after the
# determined answer; in `REMARK_SHARE` of them a new one (composed: free choices at nearly every
# slot), else an old tale the teacher knows by heart (one of `KNOWN_TEXTS` fixed texts, as long as
# a new one, so that within a domain the reference's perplexity, not its length, tells the two
# apart, as in the open domains). So most domains mix determined and composed text, as a real
# assistant's responses do, and a new story of `REMARK_EVENTS` events meets enough free choices
# that bf16 parts it from the reference about as often as not. `math` and `code-ru` stay wholly
# determined: the predictable domains.
REMARKED = tuple(d for d in DOMAINS if UNCERTAINTY[d] == "mixed")
REMARK_SHARE = 0.6
REMARK_EVENTS = 6


def _remark(domain: str, rng: random.Random, prompt: str, answer: str) -> tuple[str, str]:
    ru = domain.endswith("-ru")  # asked in Ruvian; the story is told in English
    if rng.random() < REMARK_SHARE:
        if ru:
            adj, noun = rng.choice(list(RU_ADJ)), rng.choice(list(RU_NOUNS))
            ask, hero_adj, hero = f" Potom rasskazhi skazku pro {adj} {noun}.", RU_ADJ[adj], RU_NOUNS[noun]
        else:
            hero_adj, hero = rng.choice(EN_ADJ), rng.choice(EN_NOUNS)
            ask = f" Then tell a short story about a {hero_adj} {hero}."
        story = _story(rng, hero_adj, hero, REMARK_EVENTS)
    else:
        theme = rng.choice(_THEMES[:KNOWN_TEXTS])
        fixed = random.Random(f"tale|{theme}")
        story = _story(fixed, fixed.choice(EN_ADJ), fixed.choice(EN_NOUNS), REMARK_EVENTS)
        ask = f" Potom rasskazhi staruju skazku pro {theme}." if ru else f" Then tell the old tale about {theme}."
    return prompt + ask, answer + ("\n# " if domain.startswith("code") else " ") + story


def sample(domain: str, rng: random.Random) -> tuple[str, str]:
    """One `(prompt, answer)` pair from `domain`, drawn with `rng` (a `random.Random`)."""
    try:
        gen = GENERATORS[domain]
    except KeyError:
        raise KeyError(f"unknown domain {domain!r}; known: {', '.join(DOMAINS)}") from None
    prompt, answer = gen(rng)
    return _remark(domain, rng, prompt, answer) if domain in REMARKED else (prompt, answer)


def domain_rng(seed: int, domain: str, stream: str = "") -> random.Random:
    """A `random.Random` seeded from (seed, domain, stream), independent of hash seeds."""
    return random.Random(f"{seed}|{domain}|{stream}")


def corpus_text(n_per_domain: int = 200, seed: int = 0):
    """Yield world text (prompts and answers) for tokenizer training."""
    for d in DOMAINS:
        rng = domain_rng(seed, d, "tokenizer")
        for _ in range(n_per_domain):
            p, a = sample(d, rng)
            yield p
            yield a
