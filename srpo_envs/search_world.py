"""The embedded default of SRPO-Search-v0: a seeded synthetic world, its document corpus
and 1- to 3-hop questions that cannot be answered without retrieval.

The world has people, companies, cities and countries, all with invented names, so a
model can know nothing about them beforehand. Every entity has one document written in
plain sentences ("Varo Telquist was born in Brennhold."), and each relation appears in
exactly one document: the document of its subject. A k-hop question follows k relations
from a person, so answering it needs the k documents along that chain:

    1 hop  "In which city was Varo Telquist born?"                  person -> city
    2 hops "In which country was Varo Telquist born?"               person -> city -> country
    3 hops "In which country is the headquarters of the company that Varo Telquist works
            for?"                                                  person -> company -> city -> country
    (and the variants through the founder of a company)

The world, corpus and questions are pure functions of ``world_seed`` (and the sizes);
questions of the ``train``, ``validation`` and ``test`` splits use disjoint sets of people
(the test people are the same as before the validation split was added).

``compact=True`` builds the same relations in a form a byte-level model of about 1M
parameters can read: short names made of two or three letter-pairs ("Tovi", "Bex");
one short document per entity that states only the relations the questions use
("Tovi was born in Bex. Tovi works for Rami Co."); questions in the documents' own words
that end with the person's name ("Was born in which city? Tovi"), so the query to write
is the question's last word (with prompts that end with the question, as the learner's
tiny prompts do, it sits at one distance before the reply in every round); and 6000
people by default, so names cannot be memorized and must be copied. The default world
(longer names, the name in mid-question, distractor facts such as jobs and years) is
the one for real models.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gl", "h", "k", "l", "m", "n", "p", "qu",
           "r", "s", "st", "t", "th", "v", "w", "z")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou")
_CODAS = ("", "n", "r", "l", "s", "th", "nd", "rk", "st", "x")
_CITY_ENDS = ("holm", "burg", "ford", "vale", "mere", "stad", "wick", "port")
_COUNTRY_ENDS = ("ia", "land", "onia", "istan", "ora", "ey")
_COMPANY_KINDS = ("Works", "Labs", "Foods", "Motors", "Textiles", "Systems", "Mining")
_JOBS = ("engineer", "chemist", "painter", "pilot", "teacher", "architect", "surgeon",
         "economist", "violinist", "geologist")


@dataclass(frozen=True)
class SearchTask:
    """One question with its gold answers and the corpus ids of its supporting documents."""

    task_id: str
    question: str
    answers: tuple[str, ...]
    supporting_ids: tuple[str, ...] = ()
    meta: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class World:
    documents: tuple[dict, ...]
    tasks: dict[str, tuple[SearchTask, ...]]


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                   for _ in range(syllables)).capitalize()


_SHORT_ONSETS = ("b", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
                 "w", "y", "z")
_SHORT_VOWELS = ("a", "e", "i", "o", "u")
_SHORT_CODAS = ("b", "d", "g", "k", "l", "m", "n", "r", "s", "t", "x")


def _short(rng: random.Random, syllables: int, coda: bool = False) -> str:
    word = "".join(rng.choice(_SHORT_ONSETS) + rng.choice(_SHORT_VOWELS)
                   for _ in range(syllables))
    return (word + rng.choice(_SHORT_CODAS) if coda else word).capitalize()


def build_world(world_seed: int = 0, n_people: int | None = None, n_companies: int = 60,
                n_cities: int = 40, n_countries: int = 12, test_fraction: float = 0.25,
                compact: bool = False, validation_fraction: float = 0.1) -> World:
    """The world of ``world_seed``: a corpus (id/title/text dicts) and tasks per split.
    ``n_people`` defaults to 400 (6000 with ``compact``)."""
    if n_people is None:
        n_people = 6000 if compact else 400
    for name, value, low in (("n_people", n_people, 8), ("n_companies", n_companies, 2),
                             ("n_cities", n_cities, 2), ("n_countries", n_countries, 2)):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r}: expected an int >= {low}")
    rng = random.Random(f"srpo-{'compact-' if compact else ''}world:{world_seed}")
    taken: set[str] = set()

    def fresh(make) -> str:
        while True:
            name = make()
            if name.lower() not in taken:
                taken.add(name.lower())
                return name

    if compact:
        countries = [fresh(lambda: _short(rng, 2) + "nia") for _ in range(n_countries)]
        cities = [fresh(lambda: _short(rng, 1, coda=True)) for _ in range(n_cities)]
        people = [fresh(lambda: _short(rng, 2)) for _ in range(n_people)]
        companies = [fresh(lambda: f"{_short(rng, 2)} Co") for _ in range(n_companies)]
    else:
        countries = [fresh(lambda: _word(rng, 2) + rng.choice(_COUNTRY_ENDS))
                     for _ in range(n_countries)]
        cities = [fresh(lambda: _word(rng, 1) + rng.choice(_CITY_ENDS)) for _ in range(n_cities)]
        people = [fresh(lambda: f"{_word(rng, 2)} {_word(rng, 2)}") for _ in range(n_people)]
        companies = [fresh(lambda: f"{_word(rng, 2)} {rng.choice(_COMPANY_KINDS)}")
                     for _ in range(n_companies)]

    city_country = {c: rng.choice(countries) for c in cities}
    born = {p: rng.choice(cities) for p in people}
    works = {p: rng.choice(companies) for p in people}
    job = {p: rng.choice(_JOBS) for p in people}
    year = {p: rng.randint(1921, 1999) for p in people}
    headquarters = {c: rng.choice(cities) for c in companies}
    founder = {c: rng.choice(people) for c in companies}
    founded = {c: rng.randint(1850, 2015) for c in companies}

    docs: list[dict] = []
    doc_id: dict[str, str] = {}
    prefix = f"{'compact' if compact else 'world'}{world_seed}"

    def add(title: str, text: str) -> None:
        doc_id[title] = f"{prefix}_{len(docs):06d}"
        docs.append({"id": doc_id[title], "title": title, "text": text})

    if compact:
        # Only the relations the questions follow, one short sentence each.
        for p in people:
            add(p, f"{p} was born in {born[p]}. {p} works for {works[p]}.")
        for c in companies:
            add(c, f"{c} is in {headquarters[c]}. {c} was founded by {founder[c]}.")
        for c in cities:
            add(c, f"{c} is in {city_country[c]}.")
        for c in countries:
            add(c, f"{c} is a country.")
    else:
        for p in people:
            article = "an" if job[p][0] in "aeiou" else "a"
            add(p, f"{p} is {article} {job[p]} born in {year[p]}. {p} was born in "
                   f"{born[p]}. {p} works for {works[p]}.")
        for c in companies:
            add(c, f"{c} is a company founded in {founded[c]}. {c} was founded by "
                   f"{founder[c]}. The headquarters of {c} are in {headquarters[c]}.")
        for c in cities:
            add(c, f"{c} is a city in {city_country[c]}.")
        for c in countries:
            members = sorted(x for x in cities if city_country[x] == c)
            listing = ", ".join(members) if members else "no large cities"
            add(c, f"{c} is a country. Its cities include {listing}.")

    order = list(people)
    rng.shuffle(order)
    n_test = max(1, int(len(order) * test_fraction))
    n_validation = max(1, int(len(order) * validation_fraction))
    splits = {"test": order[:n_test], "validation": order[n_test:n_test + n_validation],
              "train": order[n_test + n_validation:]}

    def chains(p: str) -> list[tuple[str, str, list[str]]]:
        company = works[p]
        boss = founder[company]
        if compact:
            # The person's name last, after the documents' own words: the name to search
            # for is always the question's last word (see the module docstring).
            return [
                (f"Was born in which city? {p}", born[p], [p]),
                (f"Works for which company? {p}", company, [p]),
                (f"Was born in which country? {p}", city_country[born[p]], [p, born[p]]),
                (f"Company is in which city? {p}", headquarters[company], [p, company]),
                (f"Company was founded by whom? {p}", boss, [p, company]),
                (f"Company is in which country? {p}", city_country[headquarters[company]],
                 [p, company, headquarters[company]]),
                (f"Company's founder was born in which city? {p}", born[boss],
                 [p, company, boss]),
            ]
        return [
            (f"In which city was {p} born?", born[p], [p]),
            (f"Which company does {p} work for?", company, [p]),
            (f"In which country was {p} born?", city_country[born[p]], [p, born[p]]),
            (f"In which city are the headquarters of the company that {p} works for?",
             headquarters[company], [p, company]),
            (f"Who founded the company that {p} works for?", boss, [p, company]),
            (f"In which country are the headquarters of the company that {p} works for?",
             city_country[headquarters[company]], [p, company, headquarters[company]]),
            (f"In which city was the founder of the company that {p} works for born?",
             born[boss], [p, company, boss]),
        ]

    tasks: dict[str, tuple[SearchTask, ...]] = {}
    for split, members in splits.items():
        items = []
        for p in members:
            for number, (question, answer, path) in enumerate(chains(p)):
                items.append(SearchTask(
                    task_id=f"{prefix}-{doc_id[p]}-q{number}", question=question,
                    answers=(answer,), supporting_ids=tuple(doc_id[t] for t in path),
                    meta={"hops": len(path), "path": tuple(path)}))
        tasks[split] = tuple(items)
    return World(documents=tuple(docs), tasks=tasks)
