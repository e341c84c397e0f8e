"""The deterministic checks that keep a small model's splits and answers honest (``agents/llm/checks.py``)."""

from __future__ import annotations

from agents.llm.base import ExecuteRequest
from agents.llm.checks import (
    answer_problem,
    check_split,
    duplicate_answers,
    needs_planning,
    strip_preamble,
)
from agents.llm.prompted import PromptedBackend

JAPAN = "Plan a two-week trip to Japan"


def test_a_split_that_restates_its_parent_fails_and_a_real_one_passes() -> None:
    assert not check_split(JAPAN, [("Go to Japan", ""), ("Do things in Japan", "")]).passes
    real = check_split(JAPAN, [("Book flights to Tokyo", "round trip"), ("Reserve hotels in Kyoto", "3 nights"),
                               ("Buy a JR rail pass", "14 days")])
    assert real.passes and real.vague == 0


def test_a_subgoal_that_names_a_whole_area_of_work_still_needs_planning() -> None:
    assert needs_planning("Plan the itinerary") is not None
    assert needs_planning("Organise the ceremony") is not None
    assert needs_planning("Book flights to Tokyo and reserve hotels in Kyoto") is not None
    for concrete in ("Buy a 14-day JR Pass", "Book the Kyoto ryokan", "Choose the wedding caterer", "Transport",
                     "Buy salt and pepper", "Pick a date and time", "Set up the tent"):
        assert needs_planning(concrete) is None, concrete


def test_an_answer_that_restates_the_task_is_vague_and_a_concrete_one_is_not() -> None:
    chain = (JAPAN, "Lodging")
    restated = ("To plan a two-week trip to Japan, you would need to choose a hotel or Airbnb in Japan. "
                "You would then plan your stay in a comfortable and convenient location.")
    assert "restates the task" in answer_problem(restated, chain)
    concrete = "Tokyo: Hotel Gracery Shinjuku, 5 nights (about 15,000 yen a night). Kyoto: Ryokan Yachiyo, 4 nights."
    assert answer_problem(concrete, chain) is None
    listed = "- Run the full test suite\n- Update CHANGELOG.md with the breaking changes\n- Tag v2.0.0 and publish"
    assert answer_problem(listed, ("Ship version 2.0 of an open-source library", "Release")) is None
    assert "too short" in answer_problem("Book hotels.", chain)
    plain = "Order a chocolate sponge cake with strawberry filling from the local bakery two days ahead."
    assert answer_problem(plain, ("Organise a wedding for 80 guests", "Cake")) is None


def test_an_answer_that_repeats_a_siblings_answer_is_off_target() -> None:
    lodging = "Tokyo: Hotel Gracery Shinjuku, 5 nights. Kyoto: Ryokan Yachiyo, 4 nights. Osaka: Cross Hotel, 3 nights."
    again = "Tokyo: Hotel Gracery Shinjuku, 5 nights. Kyoto: Ryokan Yachiyo, 4 nights. Osaka: Cross Hotel, 2 nights."
    assert "repeats the answer of another part" in answer_problem(again, (JAPAN, "Bookings"), ("Lodging",), (lodging,))
    other = "Reserve the Shinkansen Tokyo-Kyoto seats on 3 May via SmartEX; book teamLab Planets for 5 May, 10:00."
    assert answer_problem(other, (JAPAN, "Bookings"), ("Lodging",), (lodging,)) is None
    assert duplicate_answers([lodging, again, other]) == 1


def test_a_chatty_opening_is_dropped_and_the_rest_kept() -> None:
    assert strip_preamble("Certainly! Here's a concrete plan for the trip:\n1. Fly to Tokyo") == "1. Fly to Tokyo"
    assert strip_preamble("Sure.") == "Sure."  # nothing else to keep: the answer is left as it was
    assert strip_preamble("Fly to Tokyo on 1 May.") == "Fly to Tokyo on 1 May."
    nozomi = "Sure, the best option is the Nozomi train: it takes 2h15m."
    assert strip_preamble(nozomi) == "the best option is the Nozomi train: it takes 2h15m."
    museum = "Of course the museum opens at 9am. Buy tickets online."
    assert strip_preamble(museum) == museum


class _Answers(PromptedBackend):
    """Replays fixed answers in order: the retry logic under test, not a model."""

    def __init__(self, *answers: str) -> None:
        super().__init__()
        self.answers = list(answers)
        self.prompts: list[list[dict[str, str]]] = []

    def _generate(self, messages, schema, max_tokens, allow_cut=False) -> str:
        self.prompts.append(messages)
        return self.answers.pop(0)


def test_a_vague_leaf_answer_is_asked_again_with_the_problem_named() -> None:
    vague = "To plan a two-week trip to Japan, you would need to choose lodging in Japan."
    concrete = "Tokyo: Hotel Gracery Shinjuku, 5 nights. Kyoto: Ryokan Yachiyo, 4 nights."
    backend = _Answers(vague, concrete)
    request = ExecuteRequest(JAPAN, (JAPAN, "Lodging"), "", siblings=("Transport", "Food"))
    assert backend.execute(request) == concrete
    assert backend.vague_retries == 1 and backend.vague_answers == 0
    first, second = backend.prompts
    assert "Your task: Plan a two-week trip to Japan > Lodging" in first[1]["content"]
    assert second[2] == {"role": "assistant", "content": vague} and "restates the task" in second[3]["content"]


def test_a_leaf_answer_still_vague_when_asked_again_stands_and_is_counted() -> None:
    vague = "To plan a two-week trip to Japan, you would need to choose lodging in Japan."
    backend = _Answers(vague, vague, vague)
    assert backend.execute(ExecuteRequest(JAPAN, (JAPAN, "Lodging"), "")) == vague
    assert backend.vague_retries == 1 and backend.vague_answers == 1 and len(backend.answers) == 1
