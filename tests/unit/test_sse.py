"""SSE framing: events are the same however the byte stream is split."""

from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate.client import SSEDecoder


def decode(chunks):
    decoder = SSEDecoder()
    events = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events + decoder.finish()


def test_basic_events_and_done():
    stream = b'data: {"a": 1}\n\ndata: {"b": 2}\n\ndata: [DONE]\n\n'
    assert decode([stream]) == ['{"a": 1}', '{"b": 2}', "[DONE]"]


def test_multiline_data_comments_and_other_fields():
    stream = b": keep-alive\nevent: message\nid: 7\ndata: line1\ndata:line2\nretry: 10\n\n"
    assert decode([stream]) == ["line1\nline2"]


def test_crlf_and_cr_line_endings():
    assert decode([b"data: x\r\n\r\ndata: y\r\rdata: z\n\n"]) == ["x", "y", "z"]


def test_blank_lines_without_data_dispatch_nothing():
    assert decode([b"\n\n\n: c\n\n"]) == []


def test_last_event_without_closing_blank_line_is_kept():
    assert decode([b"data: tail"]) == ["tail"]


def test_unicode_line_separator_inside_json_is_not_a_line_break():
    payload = '{"text": "a\u2028b\u0085c"}'
    assert decode([f"data: {payload}\n\n".encode()]) == [payload]


payload_text = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
    max_size=40,
)
events_strategy = st.lists(st.lists(payload_text, min_size=1, max_size=3), max_size=8)
line_ending = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def stream_and_splits(draw):
    events = draw(events_strategy)
    eol = draw(line_ending)
    parts = []
    for lines in events:
        if draw(st.booleans()):
            parts.append(": comment" + eol)
        parts.extend(f"data: {line}{eol}" for line in lines)
        parts.append(eol)
    raw = "".join(parts).encode()
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    chunks, last = [], 0
    for cut in cuts:
        chunks.append(raw[last:cut])
        last = cut
    chunks.append(raw[last:])
    expected = ["\n".join(lines) for lines in events]
    return raw, chunks, expected


@settings(max_examples=300, deadline=None)
@given(stream_and_splits())
def test_any_split_gives_the_same_events(case):
    raw, chunks, expected = case
    assert decode([raw]) == expected
    assert decode(chunks) == expected


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(0, 200), max_size=10))
def test_arbitrary_bytes_split_anywhere_decode_identically(raw, cuts):
    chunks, last = [], 0
    for cut in sorted(c for c in cuts if c <= len(raw)):
        chunks.append(raw[last:cut])
        last = cut
    chunks.append(raw[last:])
    assert decode(chunks) == decode([raw])
