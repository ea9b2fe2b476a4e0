"""Writes the demo conversations in this folder (synthetic, written for this project).

Run from the repo root: ``python sample_data/make_sample_data.py``. Output:
- ``flat/conversations.parquet``: output / input / context columns (English, zh-TW, zh-CN, Korean);
- ``chat/conversations.parquet``: OpenAI chat ``messages``, some grounded only in tool results.
Both have ``conversation_id``, ``created_at`` (three days), ``model`` and ``language``.
- ``../sample_labelled/conversations_labelled.parquet``: answers labelled by hand (``label_hallucinated``,
  ``label_faithfulness`` = share of the answer's statements the context supports) for ``calibrate`` and the
  demo's ``judge_calibration``. Kept outside this folder: the landing location must not score it daily.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

HERE = Path(__file__).resolve().parent
DAY0 = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)

# (language, question, context passages, answer)
FLAT: list[tuple[str, str, list[str], str]] = [
    ("en", "When was the first iPhone announced?",
     ["The first iPhone was announced on January 9, 2007.", "It was released on June 29, 2007.",
      "Steve Jobs introduced it at Macworld."],
     "The first iPhone was announced on January 9, 2007. Steve Jobs introduced it at Macworld."),
    ("en", "When was the first iPhone released?",
     ["The first iPhone was announced on January 9, 2007.", "It was released on June 29, 2007."],
     "The first iPhone was released on June 29, 2008. It sold ten million units in its first week."),
    ("en", "How tall is the Eiffel Tower?",
     ["The Eiffel Tower is 330 metres tall including its antennas.",
      "It was completed in 1889 for the World's Fair."],
     "The Eiffel Tower is about 330 metres tall. It was completed in 1889. It might be repainted next year."),
    ("en", "What does the refund policy say?",
     ["Customers may request a refund within 30 days of purchase.",
      "Refunds are issued to the original payment method."],
     "You can request a refund within 30 days of purchase. Refunds go to the original payment method. "
     "Hope this helps!"),
    ("en", "Summarise the outage report.",
     ["The outage began at 14:05 UTC and lasted 42 minutes.", "A faulty configuration push caused it."],
     "The outage began at 14:05 UTC and lasted 42 minutes. It was caused by a cyberattack from abroad."),
    ("en", "Who wrote the report?", [], "The report was written by the platform team in March."),
    ("en", "Any update?", ["The migration finished on Tuesday."], ""),
    ("zh-TW", "台北101有多高？",
     ["台北101大樓高度為508公尺。", "台北101於2004年落成啟用。"],
     "台北101的高度為508公尺。它於2004年落成啟用。"),
    ("zh-TW", "這家店幾點營業？",
     ["本店營業時間為上午十點至晚上九點。", "每週一公休。"],
     "本店營業時間為上午十點至晚上九點。週末有八折優惠。"),
    ("zh-TW", "退貨規定是什麼？",
     ["商品於收到後七天內可以申請退貨。", "退貨時需附上發票。"],
     "收到商品後七天內可以申請退貨。退貨時需要附上發票。可能還需要原包裝。"),
    ("zh-CN", "长城有多长？",
     ["长城总长度约为21196千米。", "长城始建于春秋战国时期。"],
     "长城总长度约为21196千米。长城始建于春秋战国时期。"),
    ("zh-CN", "这款手机的电池容量是多少？",
     ["这款手机配备5000毫安时电池。", "支持65瓦快速充电。"],
     "这款手机配备4000毫安时电池。支持65瓦快速充电。它是全球销量最高的手机。"),
    ("zh-CN", "会议在哪里举行？", [], "会议将在上海国际会议中心举行。"),
    ("ko", "서울의 인구는 얼마입니까?",
     ["서울의 인구는 약 940만 명이다.", "서울은 대한민국의 수도이다."],
     "서울의 인구는 약 940만 명입니다. 서울은 대한민국의 수도입니다."),
    ("ko", "배송은 얼마나 걸리나요?",
     ["일반 배송은 영업일 기준 3일이 소요된다.", "제주도는 추가 2일이 걸린다."],
     "일반 배송은 영업일 기준 3일이 걸립니다. 모든 주문은 무료로 배송됩니다."),
    ("ko", "환불 정책을 알려주세요.",
     ["구매 후 14일 이내에 환불을 요청할 수 있다."],
     "구매 후 30일 이내에 환불을 요청할 수 있습니다. 아마 수수료가 부과될 수 있습니다."),
    ("ko", "감사합니다", ["고객센터는 24시간 운영된다."], ""),
]

SYSTEM = {"role": "system", "content": "You are a helpful support assistant."}


def _tool_call(call_id: str, name: str, args: dict[str, object]) -> dict[str, object]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _msg(role: str, content: str | None, **extra: object) -> dict[str, object]:
    return {"role": role, "content": content, "tool_calls": extra.get("tool_calls"),
            "tool_call_id": extra.get("tool_call_id"), "name": extra.get("name")}


CHAT: list[tuple[str, list[dict[str, object]], list[str] | None]] = [
    # grounded only in tool results (no context column value)
    ("en", [
        SYSTEM,
        _msg("user", "What's the weather in Paris right now?"),
        _msg("assistant", None, tool_calls=[_tool_call("c1", "get_weather", {"city": "Paris"})]),
        _msg("tool", json.dumps({"city": "Paris", "temp_c": 14, "sky": "light rain"}), tool_call_id="c1"),
        _msg("assistant", "It is 14 °C in Paris with light rain."),
    ], None),
    ("en", [
        SYSTEM,
        _msg("user", "How many open tickets does ACME have?"),
        _msg("assistant", None, tool_calls=[_tool_call("c2", "crm_lookup", {"account": "ACME"})]),
        _msg("tool", json.dumps({"account": "ACME", "open_tickets": 3, "tier": "gold"}), tool_call_id="c2",
             name="crm_lookup"),
        _msg("assistant", "ACME has 5 open tickets. ACME is a gold-tier customer."),
    ], None),
    ("zh-TW", [
        SYSTEM,
        _msg("user", "我的訂單到哪裡了？"),
        _msg("assistant", None, tool_calls=[_tool_call("c3", "track_order", {"id": "A-1009"})]),
        _msg("tool", json.dumps({"status": "已出貨", "eta": "11月27日"}, ensure_ascii=False), tool_call_id="c3"),
        _msg("assistant", "您的訂單已出貨，預計11月27日送達。"),
    ], None),
    ("ko", [
        SYSTEM,
        _msg("user", "내일 회의실 예약 가능한가요?"),
        _msg("assistant", None, tool_calls=[_tool_call("c4", "room_status", {"date": "tomorrow"})]),
        _msg("tool", json.dumps({"room": "A", "available": True, "slots": ["10:00", "15:00"]}), tool_call_id="c4"),
        _msg("assistant", "내일 A 회의실은 10:00과 15:00에 예약 가능합니다."),
    ], None),
    # multi-turn with a context column
    ("en", [
        SYSTEM,
        _msg("user", "What is the capital of Australia?"),
        _msg("assistant", "The capital of Australia is Canberra."),
        _msg("user", "And its population?"),
        _msg("assistant", "Canberra has about 460,000 residents. It is the largest city in Australia."),
    ], ["Canberra is the capital city of Australia.", "Canberra has a population of about 460,000."]),
    ("zh-CN", [
        SYSTEM,
        _msg("user", "故宫每天开放吗？"),
        _msg("assistant", "故宫周一闭馆，其他日期正常开放。"),
    ], ["故宫博物院周一闭馆。", "旺季开放时间为8:30至17:00。"]),
    ("ko", [
        SYSTEM,
        _msg("user", "이 제품의 보증 기간은?"),
        _msg("assistant", "보증 기간은 2년입니다. 배터리는 보증에서 제외될 수 있습니다."),
    ], ["이 제품의 보증 기간은 1년이다."]),
    # empty context and no tool results; and a conversation without any assistant answer
    ("en", [SYSTEM, _msg("user", "Tell me a fun fact."), _msg("assistant", "Octopuses have three hearts.")], None),
    ("en", [SYSTEM, _msg("user", "Hello?")], None),
]


# (language, source, question, context, answer, hallucinated, share of the answer's statements supported)
LABELLED: list[tuple[str, str, str, list[str], str, bool, float]] = [
    ("en", "support", "How long is the warranty?", ["The warranty lasts two years from the date of purchase."],
     "The warranty lasts two years from the date of purchase.", False, 1.0),
    ("en", "support", "How long is the warranty?", ["The warranty lasts two years from the date of purchase."],
     "The warranty lasts five years and covers accidental damage.", True, 0.0),
    ("en", "support", "Can I pay by invoice?",
     ["Business customers can pay by invoice.", "Private customers pay by card or bank transfer."],
     "Business customers can pay by invoice. Private customers pay by card or bank transfer.", False, 1.0),
    ("en", "support", "Can I pay by invoice?",
     ["Business customers can pay by invoice.", "Private customers pay by card or bank transfer."],
     "Anyone can pay by invoice. Invoices are due within 60 days.", True, 0.0),
    ("en", "support", "Where is the nearest store?", ["Our Berlin store is at Alexanderplatz 3."],
     "The Berlin store is at Alexanderplatz 3. It opens at 8 am on Sundays.", True, 0.5),
    ("en", "facts", "When did Apollo 11 land?",
     ["Apollo 11 landed on the Moon on July 20, 1969.", "Neil Armstrong and Buzz Aldrin walked on the surface."],
     "Apollo 11 landed on July 20, 1969. Neil Armstrong and Buzz Aldrin walked on the surface.", False, 1.0),
    ("en", "facts", "When did Apollo 11 land?",
     ["Apollo 11 landed on the Moon on July 20, 1969.", "Neil Armstrong and Buzz Aldrin walked on the surface."],
     "Apollo 11 landed in 1971. Michael Collins walked on the surface.", True, 0.0),
    ("en", "facts", "What is the boiling point of water?",
     ["At sea level, water boils at 100 degrees Celsius."],
     "At sea level, water boils at 100 degrees Celsius.", False, 1.0),
    ("en", "facts", "What is the boiling point of water?",
     ["At sea level, water boils at 100 degrees Celsius."],
     "Water boils at 100 degrees Celsius at sea level. On Mount Everest it boils at 50 degrees.", True, 0.5),
    ("zh", "support", "退货期限是多久？", ["商品签收后十五天内可以申请退货。"],
     "商品签收后十五天内可以申请退货。", False, 1.0),
    ("zh", "support", "退货期限是多久？", ["商品签收后十五天内可以申请退货。"],
     "商品签收后三十天内可以申请退货。运费由商家承担。", True, 0.0),
    ("zh", "support", "客服几点上班？", ["客服工作时间为每天早上九点到晚上六点。"],
     "客服工作时间为每天早上九点到晚上六点。", False, 1.0),
    ("zh", "facts", "珠穆朗玛峰有多高？", ["珠穆朗玛峰海拔约8849米。", "它位于中国与尼泊尔边境。"],
     "珠穆朗玛峰海拔约8849米。它位于中国与尼泊尔边境。", False, 1.0),
    ("zh", "facts", "珠穆朗玛峰有多高？", ["珠穆朗玛峰海拔约8849米。", "它位于中国与尼泊尔边境。"],
     "珠穆朗玛峰海拔约9000米。它是由火山喷发形成的。", True, 0.0),
    ("zh", "facts", "黄河有多长？", ["黄河全长约5464千米。"],
     "黄河全长约5464千米。黄河是世界上最长的河流。", True, 0.5),
    ("ko", "support", "주차가 가능한가요?", ["건물 지하에 2시간 무료 주차가 가능하다."],
     "건물 지하에 2시간 무료 주차가 가능합니다.", False, 1.0),
    ("ko", "support", "주차가 가능한가요?", ["건물 지하에 2시간 무료 주차가 가능하다."],
     "건물 옆 공영 주차장에서 하루 종일 무료로 주차할 수 있습니다.", True, 0.0),
    ("ko", "support", "회원 가입비가 있나요?", ["회원 가입은 무료이다.", "연회비도 없다."],
     "회원 가입은 무료입니다. 연회비도 없습니다.", False, 1.0),
    ("ko", "facts", "한라산의 높이는?", ["한라산의 높이는 1947미터이다.", "한라산은 제주도에 있다."],
     "한라산의 높이는 1947미터입니다. 한라산은 제주도에 있습니다.", False, 1.0),
    ("ko", "facts", "한라산의 높이는?", ["한라산의 높이는 1947미터이다.", "한라산은 제주도에 있다."],
     "한라산의 높이는 2500미터입니다. 한라산은 강원도에 있습니다.", True, 0.0),
    ("ko", "facts", "세종대왕은 무엇을 만들었나?", ["세종대왕은 1443년에 훈민정음을 창제하였다."],
     "세종대왕은 1443년에 훈민정음을 창제하였습니다. 그는 거북선도 발명했습니다.", True, 0.5),
]


def build() -> None:
    models = ["gpt-4o-mini", "claude-3-5-haiku"]
    flat_rows = []
    for i, (lang, question, context, answer) in enumerate(FLAT):
        flat_rows.append({
            "conversation_id": f"flat-{i:03d}", "created_at": DAY0 + timedelta(days=i % 3, minutes=7 * i),
            "model": models[i % 2], "language": lang, "input": question, "output": answer, "context": context,
        })
    flat = pl.DataFrame(flat_rows, schema={
        "conversation_id": pl.String, "created_at": pl.Datetime("us", "UTC"), "model": pl.String,
        "language": pl.String, "input": pl.String, "output": pl.String, "context": pl.List(pl.String)})
    chat_rows = []
    for i, (lang, messages, context) in enumerate(CHAT):
        chat_rows.append({
            "conversation_id": f"chat-{i:03d}", "created_at": DAY0 + timedelta(days=i % 3, hours=3, minutes=11 * i),
            "model": models[(i + 1) % 2], "language": lang, "messages": messages, "context": context,
        })
    message = pl.Struct({"role": pl.String, "content": pl.String, "tool_calls": pl.List(pl.Struct({
        "id": pl.String, "type": pl.String, "function": pl.Struct({"name": pl.String, "arguments": pl.String})})),
        "tool_call_id": pl.String, "name": pl.String})
    chat = pl.DataFrame(chat_rows, schema={
        "conversation_id": pl.String, "created_at": pl.Datetime("us", "UTC"), "model": pl.String,
        "language": pl.String, "messages": pl.List(message), "context": pl.List(pl.String)})
    for name, frame in (("flat", flat), ("chat", chat)):
        (HERE / name).mkdir(exist_ok=True)
        frame.write_parquet(HERE / name / "conversations.parquet")
        print(f"wrote {HERE / name / 'conversations.parquet'}: {frame.height} rows")
    labelled = pl.DataFrame(
        [{"conversation_id": f"labelled-{i:03d}", "model": models[i % 2], "language": lang, "source": source,
          "input": question, "output": answer, "context": context, "label_hallucinated": hallucinated,
          "label_faithfulness": supported}
         for i, (lang, source, question, context, answer, hallucinated, supported) in enumerate(LABELLED)],
        schema={"conversation_id": pl.String, "model": pl.String, "language": pl.String, "source": pl.String,
                "input": pl.String, "output": pl.String, "context": pl.List(pl.String),
                "label_hallucinated": pl.Boolean, "label_faithfulness": pl.Float64},
    )
    target = HERE.parent / "sample_labelled"
    target.mkdir(exist_ok=True)
    labelled.write_parquet(target / "conversations_labelled.parquet")
    print(f"wrote {target / 'conversations_labelled.parquet'}: {labelled.height} rows")


if __name__ == "__main__":
    build()
