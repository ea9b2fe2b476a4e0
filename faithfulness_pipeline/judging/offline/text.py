"""Multilingual text utilities of the offline judge: sentences, content units, numbers, cues.

Pure stdlib and deterministic. English, Chinese (Traditional and Simplified) and Korean are each
matched the way plain lexical matching works best for them (measured on ``datasets/dev`` with
``bench/offline_agreement.py``):

* Latin words: lowercased, clitics ('s, n't) cut, stopwords and discourse words ("the passage
  discusses") dropped, light suffix stemming.
* Han: Traditional folded to Simplified through a table of common characters (so a zh-TW answer
  matches a zh-CN context), then characters (minus function characters) and character pairs.
* Hangul: each eojeol (space-separated word) gives its first two syllables, a crude but robust
  stand-in for its stem (particles and endings come last), which must match the stem of a context
  word, plus its inner syllable pairs, which may match anywhere (spacing varies in Korean).
  Measured on the KLUE rows: stems alone and stems + pairs agree equally well; pairs are kept for
  compounds and spacing ("졸업작품" / "졸업 작품"). Stripping particle and ending lists did worse.

Sentences end at ``.!?`` followed by a space (not after abbreviations, initials or inside
decimals), at ``。！？`` and the full-width ``；`` (in CJK text it separates independent clauses),
and at line breaks; list bullets are dropped; closing quotes stay with their sentence; an ellipsis
ends a sentence only before a capital letter.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate, compress, repeat

#: A content unit: an English stem (str), or a CJK character or pair as an int (see ``_cjk_key``).
Unit = str | int

# --------------------------------------------------------------------------- scripts

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HANGUL = "\uac00-\ud7a3"
_CJK_RE = re.compile(f"[{_HAN}{_HANGUL}]")

# Traditional -> Simplified for the commonest characters that differ (pairs: T then S). Both the
# claim and the context are folded, so a zh-TW answer still matches a zh-CN context.
_T2S_PAIRS = (
    "們们個个這这來来時时會会說说為为國国學学對对發发經经過过還还進进後后現现無无與与長长開开"
    "問问關关見见點点體体電电種种實实動动當当機机業业頭头間间樣样員员書书車车東东門门馬马鳥鸟"
    "魚鱼龍龙雲云風风飛飞氣气處处從从論论認认識识讓让話话語语請请讀读寫写買买賣卖錢钱銀银鐵铁"
    "價价單单總总題题類类顯显響响頁页順顺須须預预領领愛爱歡欢樂乐觀观聽听聲声覺觉變变記记計计"
    "設设許许試试該该詳详誤误課课調调談谈謝谢證证議议護护讚赞貝贝負负財财貨货質质費费資资賽赛"
    "趕赶軍军轉转輕轻較较輪轮辦办農农邊边連连運运遠远適适選选遺遗鄉乡醫医針针錄录鐘钟閉闭閱阅"
    "陽阳陰阴際际隊队隨随險险雖虽雙双雜杂難难靈灵靜静韓韩額额館馆驗验髮发鬥斗鮮鲜麥麦黃黄黨党"
    "齊齐齒齿舊旧萬万億亿產产絲丝兩两嚴严臨临麗丽舉举義义習习亂乱爭争於于亞亚親亲僅仅優优傳传"
    "傷伤債债傾倾偉伟側侧儀仪償偿兒儿內内冊册淨净涼凉減减幾几鳳凤擊击則则剛刚創创劃划劇剧勁劲"
    "勞劳務务勢势勵励勸劝區区華华協协衛卫卻却廠厂廳厅歷历壓压厲厉參参敘叙號号嘆叹葉叶吳吴啟启"
    "喚唤團团園园圍围圖图場场壞坏塊块堅坚壇坛墳坟壯壮殼壳備备復复夠够夾夹奪夺獎奖奮奋婦妇媽妈"
    "嬰婴寶宝寵宠審审寬宽尋寻導导將将爾尔塵尘嘗尝層层屬属歲岁島岛峽峡崗岗嶺岭幣币帥帅師师帶带"
    "幫帮幹干乾干廣广莊庄慶庆庫库應应廢废異异彈弹強强歸归徑径徹彻憶忆懷怀態态戀恋戰战戲戏戶户"
    "撲扑擴扩掃扫揚扬換换損损搖摇攜携攝摄擺摆擇择擁拥擋挡據据擠挤擾扰數数斷断晉晋曉晓暫暂曬晒"
    "權权條条楊杨極极構构槍枪標标樹树橋桥檢检歐欧殘残殺杀漢汉湯汤滿满災灾灣湾爐炉煙烟熱热燈灯"
    "營营獲获猶犹獨独獻献環环瑪玛畫画療疗盡尽監监盤盘眾众礦矿確确碼码禮礼禍祸稅税稱称穩稳窮穷"
    "竊窃筆笔築筑簡简範范糧粮緊紧紀纪約约紅红級级紙纸純纯紛纷細细終终組组結结絕绝給给統统綠绿"
    "維维綱纲網网緒绪線线練练縣县績绩織织繞绕繼继續续羅罗聖圣聞闻聯联職职膽胆膚肤腦脑臟脏興兴"
    "艦舰藝艺節节蘇苏蘭兰蟲虫術术補补裝装製制複复規规視视觸触訊讯討讨訓训訪访診诊評评詞词詩诗"
    "諸诸謎谜豐丰貢贡責责販贩貧贫貪贪貫贯貴贵貸贷賀贺賊贼賓宾賞赏賢贤賭赌購购跡迹踐践躍跃軌轨"
    "軟软載载輔辅輸输辭辞達达遷迁遲迟郵邮醜丑釋释鈴铃鉛铅銅铜銳锐錯错鋼钢錦锦鍋锅鍵键鎖锁鎮镇"
    "鏡镜閃闪閒闲閣阁闆板陳陈陸陆階阶隱隐隻只雞鸡離离霧雾頂顶項项頒颁頓顿頻频顆颗顏颜願愿顧顾"
    "餅饼養养駐驻騎骑騰腾驚惊鬧闹鳴鸣鴨鸭鵝鹅鷹鹰龜龟裡里裏里著着麼么週周樓楼燒烧寧宁衝冲準准"
    "決决況况凍冻劍剑勝胜匯汇壽寿孫孙憂忧擔担掛挂採采漲涨濟济爺爷獄狱盜盗礙碍穀谷窩窝紐纽絡络"
    "綜综緩缓縮缩罰罚聰聪腳脚臉脸藥药蔣蒋襲袭覽览訂订訴诉註注詢询誕诞誌志誠诚誰谁謂谓謀谋謊谎"
    "講讲譯译譽誉貞贞賴赖贈赠趙赵辯辩邏逻鄰邻鄭郑釣钓銷销鋪铺闊阔隸隶韋韦頸颈飯饭飲饮飾饰餘余"
    "驅驱鬆松魯鲁鹽盐麵面齡龄沒没別别嗎吗臺台帳账曆历敗败贏赢報报編编輯辑專专貓猫豬猪檔档鏈链"
    "係系妳你倫伦儘尽劉刘錶表傑杰張张鄧邓馮冯蕭萧閻阎鍾钟譚谭鄒邹喬乔龔龚態态驗验廚厨絡络"
)
_T2S = str.maketrans({_T2S_PAIRS[i]: _T2S_PAIRS[i + 1] for i in range(0, len(_T2S_PAIRS), 2)})
_TRADITIONAL_RE = re.compile("[" + _T2S_PAIRS[::2] + "]")


# Full-width punctuation, digits and the ideographic space are nearly all that keeps Chinese text
# from being NFKC already. Each maps to its full compatibility decomposition (one ASCII character),
# so replacing them first cannot change the NFKC result; when nothing else needs normalising, the
# plain replacements (a few C scans) stand in for the much slower full normalisation.
_COMMON_COMPAT = tuple(
    (c, unicodedata.normalize("NFKD", c))
    for c in "，：；（）！？％　０１２３４５６７８９"
    if unicodedata.normalize("NFKD", c) == unicodedata.normalize("NFKC", c) != c
)


def prepare(text: str) -> str:
    """NFKC (full-width digits and letters, compatibility ideographs) and straight apostrophes,
    for matching only, never for display. ASCII text is returned as is."""
    if text.isascii():
        return text
    if not unicodedata.is_normalized("NFKC", text):
        simple = text
        for compat, plain in _COMMON_COMPAT:
            if compat in simple:
                simple = simple.replace(compat, plain)
        text = simple if unicodedata.is_normalized("NFKC", simple) else unicodedata.normalize("NFKC", text)
    return text.replace("’", "'")


def fold_chinese(text: str) -> str:
    """Fold the common Traditional characters to Simplified (others pass through unchanged)."""
    return text.translate(_T2S) if _TRADITIONAL_RE.search(text) else text


# --------------------------------------------------------------------------- sentences


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Never end a sentence: titles and Latin abbreviations that are always followed by more text.
_ABBREV_INNER = _words(
    "mr mrs ms dr prof st vs e.g i.e cf approx dept univ gen col capt lt sgt rev hon gov sen rep mt ft al"
)
# Abbreviations that end a sentence only when no number follows ("No. 5", "Fig. 2", "Sept. 2017").
_ABBREV_BEFORE_NUMBER = _words(
    "no nos vol vols fig figs op p pp jan feb mar apr jun jul aug sep sept oct nov dec"
)
# Abbreviations that end a sentence only when a capital letter (or CJK text) follows.
_ABBREV_FINAL = _words("etc inc ltd co corp jr sr a.m p.m bros esp")

_TERMINATOR_RE = re.compile(r"[.!?…。！？；]+[\"'”’»)\]」』）》]*")
_CLOSERS = "\"'”’»)]」』）》"
_OPEN_QUOTES = "\"“‘«「『（(["
_BULLET_RE = re.compile(r"\s*(?:[-*•·‣▪●◦–—>]+|\d{1,3}[.)、]|[(（]\d{1,3}[)）]|#{1,6})\s+")
_NEXT_CHAR_RE = re.compile(r"\s*(\S?)")
_INITIALS_RE = re.compile(r"(?:[A-Za-z]\.)*[A-Za-z]")


def _is_boundary(line: str, start: int, end: int) -> bool:
    """Whether the terminator at line[start:end] (closing quotes included) ends a sentence."""
    punct = line[start:end].rstrip(_CLOSERS)
    if punct[-1] in "。！？；":
        return True
    after = line[end : end + 1]
    glued = bool(after) and not after.isspace()
    nxt = m.group(1) if (m := _NEXT_CHAR_RE.match(line, end)) else ""
    if "…" in punct or punct.startswith(".."):
        return not glued and (not nxt or nxt.isupper() or nxt in _OPEN_QUOTES)
    if glued:
        # "3.5", "U.S.A", "Yahoo!Inc" continue; CJK text written without a space after "!?" or
        # after "다." does not.
        prev = line[start - 1 : start]
        return bool(_CJK_RE.match(after)) and (punct[0] != "." or bool(_CJK_RE.match(prev)))
    if not nxt or punct != ".":
        return True
    j = start
    while j > 0 and ((line[j - 1].isascii() and line[j - 1].isalpha()) or line[j - 1] == "."):
        j -= 1
    raw = line[j:start].lstrip(".")
    if not raw:
        return True
    word = raw.lower()
    if word in _ABBREV_INNER or raw == "v":  # "Brown v. Board": lowercase v is "versus"
        return False
    if word in _ABBREV_BEFORE_NUMBER:
        return not nxt.isdigit()
    if word in _ABBREV_FINAL:
        return nxt.isupper() or bool(_CJK_RE.match(nxt))
    # "U.S. Army", "J. K. Rowling": initials continue; "Francis I. The" and "Charles V. He" do not.
    return not _INITIALS_RE.fullmatch(word) or word in ("i", "v", "x")


def split_sentences(text: str) -> list[str]:
    """Split text into sentences (bullets and markdown markers removed, whitespace trimmed)."""
    out: list[str] = []
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if line and (line[0] in "-*•·‣▪●◦–—>#(（" or line[0].isdigit()):
            bullet = _BULLET_RE.match(line)
            if bullet:
                line = line[bullet.end() :]
        line = line.replace("**", "").strip()
        if not line:
            continue
        begin = 0
        for m in _TERMINATOR_RE.finditer(line):
            if _is_boundary(line, m.start(), m.end()):
                piece = line[begin : m.end()].strip()
                if piece:
                    out.append(piece)
                begin = m.end()
        tail = line[begin:].strip()
        if tail:
            out.append(tail)
    return out


def passage_sentences(text: str) -> list[str]:
    """Cheap split for context passages: it only bounds where a claim's closest sentence is, so
    plain string replacement (no regex scan, much faster on long contexts) is good enough."""
    t = text.replace(". ", ".\n").replace("! ", "!\n").replace("? ", "?\n")
    if not t.isascii():
        for mark in "。！？；":
            t = t.replace(mark, mark + "\n")
    return [s for s in t.split("\n") if s and not s.isspace()]


# --------------------------------------------------------------------------- claim filters

_QUESTION_RE = re.compile(r"[?？][\"'”’»)\]」』）》]*$")
_LEAD_IN_RE = re.compile(r"[:：]$")
_PUNCT_RE = re.compile(r"[^\w\s']+")

# Pleasantries and sign-offs. A short sentence that starts with one of the first kind, or is
# exactly one of the second kind ("Sure!" but not "Certainly, revenue grew 5%."), is not a claim.
_PLEASANTRY_OPENINGS = (
    "hope this helps", "i hope this helps", "hope that helps", "i hope that helps", "hope it helps",
    "let me know if", "feel free to", "thank you", "thanks", "you're welcome", "you are welcome",
    "glad i could help", "happy to help", "good luck", "have a great day", "have a nice day",
    "great question", "good question",
    "希望对你有帮助", "希望這對你有幫助", "希望这对你有帮助", "希望對你有幫助", "希望能帮到你",
    "希望能幫到你", "谢谢", "謝謝", "不客气", "不客氣", "祝你好运", "祝你好運", "如有其他问题",
    "如有其他問題", "如果还有其他问题", "如果還有其他問題",
    "감사합니다", "고맙습니다", "도움이 되었으면", "도움이 되셨으면", "도움이 되길", "도움이 되기를",
    "궁금한 점이 있으면", "궁금한 점이 있으시면", "천만에요", "좋은 하루",
)
# An English opening must end at a word boundary ("thanks" is not "thanksgiving"); CJK text has none.
_PLEASANTRY_PREFIXES = tuple(p + " " if p.isascii() else p for p in _PLEASANTRY_OPENINGS)
_PLEASANTRY_WHOLE = frozenset(
    ("sure", "certainly", "absolutely", "of course", "okay", "ok", "是的", "对", "對", "嗯", "好", "好的",
     "当然", "當然", "네", "예", "물론입니다", "물론이죠")
)


def is_question(sentence: str) -> bool:
    return bool(_QUESTION_RE.search(sentence.strip()))


def is_pleasantry(sentence: str) -> bool:
    if len(sentence) > 80:
        return False
    norm = " ".join(_PUNCT_RE.sub(" ", sentence.replace("’", "'").lower()).split())
    return norm in _PLEASANTRY_WHOLE or norm in _PLEASANTRY_OPENINGS or norm.startswith(_PLEASANTRY_PREFIXES)


def is_lead_in(sentence: str) -> bool:
    """'Here is a summary:' introduces content rather than stating any."""
    return bool(_LEAD_IN_RE.search(sentence.strip()))


# --------------------------------------------------------------------------- word lists

_STOPWORDS = _words(
    """a an the and or but if then else so as of at by for with about against between into through
    during before after above below to from up down in out on off over under again further once here
    there when where why how all any both each few more most other some such only own same than too
    very can will just should now i me my myself we our ours ourselves you your yours yourself
    yourselves he him his himself she her hers herself it its itself they them their theirs
    themselves what which who whom whose this that these those am is are was were be been being have
    has had having do does did doing would shall also while although though because since until unless
    whether either yet however therefore thus hence upon onto within without via per among amongst
    around across along toward towards behind beyond near like unlike said says say one ones another
    thing things something anything everything someone anyone everyone us let lets get got getting go
    goes going went gone make makes made many much lot lots really well even still ever yes yeah oh
    okay ok hey hi hello um uh ah wow am pm cannot not no never nor none neither may might could
    possibly perhaps likely probably maybe must th st nd rd almost nearly approximately roughly circa"""
)
# Words a summary or answer uses to talk about its source rather than to state facts ("The passage
# discusses ...", "Firstly, it mentions ..."): leaving them out of the content is what lets a
# faithful summary match its document.
_DISCOURSE = _words(
    """passage article text document documents summary summarize summarizes transcript excerpt source
    speaker speakers narrator discuss discusses discussed discussion mention mentions mentioned describe
    describes described explain explains explained highlight highlights highlighted emphasize
    emphasizes emphasized outline outlines overview focus focuses focused cover covers covered detail
    details provide provides provided topic topics additionally firstly secondly thirdly finally
    furthermore moreover overall separately meanwhile respectively including include includes various
    several different certain numerous multiple main key particular specific based due regarding
    concerning individual individuals"""
)
# English number words are numbers, not content: "three euros" must match "€3".
_WORD_NUMBERS = {
    "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
    "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100,
    "dozen": 12,
}
_SKIP = _STOPWORDS | _DISCOURSE | frozenset(_WORD_NUMBERS) | _words("thousand million billion trillion bn")
_CLITICS = ("'s", "'re", "'ve", "'ll", "'d", "'m")

_ZH_STOP = frozenset(
    "的了是在和与及也就都而着之其这那个们我你他她它吗呢吧啊呀嘛把被对从向于以为等将又还很更该此些地得所"
)
_ZH_STOP_CHARS = "".join(sorted(_ZH_STOP))

_LATIN_RE = re.compile(r"[a-zß-öø-ÿĀ-ɏ][a-zß-öø-ÿĀ-ɏ']*")
_LATIN_OR_BREAK_RE = re.compile(r"[a-zß-öø-ÿĀ-ɏ][a-zß-öø-ÿĀ-ɏ']*|\n")
_DIGIT_RE = re.compile(r"\d")
# ASCII text: every byte but letters, apostrophes and line breaks becomes a space, so that
# ``split`` yields the same words as ``_LATIN_RE`` at a third of the cost.
_NOT_WORD = bytes(c for c in range(128) if not (chr(c).isalpha() or chr(c) in "'\n"))
_ASCII_WORDS = bytes.maketrans(_NOT_WORD, b" " * len(_NOT_WORD))
_LATIN_SURFACE_RE = re.compile(r"[A-Za-zß-öø-ÿÀ-ÖØ-ÞĀ-ɏ][A-Za-zß-öø-ÿÀ-ÖØ-ÞĀ-ɏ']*")
_HAN_RUN_RE = re.compile(f"[{_HAN}]+")
_HAN_RE = re.compile(f"[{_HAN}]")
_HANGUL_WORD_RE = re.compile(f"[{_HANGUL}]+")
_HANGUL_RE = re.compile(f"[{_HANGUL}]")
_HANGUL_STEM_RE = re.compile(f"(?<![{_HANGUL}])[{_HANGUL}]{{2}}")
_HANGUL_SYLLABLE_WORD_RE = re.compile(f"(?<![{_HANGUL}])[{_HANGUL}](?![{_HANGUL}])")


# --------------------------------------------------------------------------- units


def _latin_words(lower: str) -> list[str]:
    if lower.isascii():
        return lower.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split()
    return _LATIN_RE.findall(lower)


def _stem(word: str) -> str:
    """Light English suffix stripping: enough to match form/formed/forming and city/cities."""
    w = word
    n = len(w)
    if n > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif n > 5 and w.endswith("ing"):
        w = w[:-3]
    elif n > 4 and w.endswith(("ed", "ly")):
        w = w[:-2]
    elif n > 3 and w.endswith("es") and w[-3] in "sxzh":
        w = w[:-2]  # watches -> watch
    elif n > 3 and w.endswith("s") and w[-2] != "s":
        w = w[:-1]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]  # stopped -> stop
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]  # release / released -> releas
    return w


def _word_unit(word: str) -> str:
    """The unit of one lowercased word, or "" when it carries no content."""
    if "'" in word:
        if word.endswith("n't"):
            word = word[:-3]  # didn't -> did (a stopword); the negation is counted separately
        else:
            for clitic in _CLITICS:
                if word.endswith(clitic):
                    word = word[: -len(clitic)]
                    break
            word = word.replace("'", "")  # o'brien -> obrien, on both sides alike
    if word in _SKIP or len(word) < 2:
        return ""
    return _stem(word)


# word -> its unit. Set operations against this cache keep most per-word work in C. It is
# replaced (not cleared) when full, so a caller holding the old one never misses a word it added.
# The bound keeps it near 15 MB: a long run over a large vocabulary must not grow without end.
_unit_cache: dict[str, str] = {}
_UNIT_CACHE_MAX = 100_000


def _word_units(words: set[str]) -> dict[str, str]:
    global _unit_cache
    cache = _unit_cache
    if len(cache) > _UNIT_CACHE_MAX:
        cache = _unit_cache = {}
    for w in words.difference(cache):
        cache[w] = _word_unit(w)
    return cache


def _latin_part(lower: str, words: list[str]) -> tuple[set[str], list[float]]:
    """Units of the Latin words and the (digit or English word) numbers of lowercased text."""
    distinct = set(words)
    unit_of = _word_units(distinct)
    units = set(map(unit_of.__getitem__, distinct))
    units.discard("")
    return units, _numbers_of(lower, words, distinct)


def _numbers_of(lower: str, words: list[str], distinct: set[str] | None = None) -> list[float]:
    found = _digit_values(lower)
    if not _WORD_NUMBERS.keys().isdisjoint(words if distinct is None else distinct):
        values = list(map(_WORD_NUMBERS.get, words))
        previous, last = 0, -2  # the value of the number word at ``last`` (0 once it is used up)
        for i in compress(range(len(values)), values):  # only the number words, found in C
            value = values[i]
            assert value is not None
            if i != last + 1:
                previous = 0
            if 20 <= previous <= 90 and value < 10:
                found[-1] = float(previous + value)  # twenty-five
                previous = 0
            else:
                found.append(float(value))
                previous = value
            last = i
    return found


def _digit_values(lower: str) -> list[float]:
    """Numbers written in digits (thousands separators and multipliers such as "million", 万, 억
    applied); codes like "v2" count too, alike on both sides."""
    if _has_multiplier(lower):
        return [value for value, _ in _digit_numbers(lower)]
    if lower.isascii():
        # Runs of digits, commas and periods by one byte translation and a split, each stripped
        # of its leading and trailing commas and periods: what the pattern finds, without a scan
        # in the regex engine.
        runs = lower.encode("ascii").translate(_ASCII_NUMBER_RUNS).decode("ascii").split()
        tokens = list(filter(None, map(str.strip, runs, repeat(",."))))
    else:
        tokens = _STRIPPED_NUMBER_RE.findall(lower)
    return _token_values(tokens)


def _token_values(tokens: list[str]) -> list[float]:
    """The values of numbers as ``_STRIPPED_NUMBER_RE`` finds them."""
    plain = "".join(tokens)
    if plain.isdigit() and (len(plain) <= 30 or max(map(len, tokens)) <= 30):
        return list(map(float, tokens))  # only digit runs: what _parse_digits would make of each
    found: list[float] = []
    for tok in tokens:
        found.extend(_parse_digits(tok))
    return found


def _has_multiplier(lower: str) -> bool:
    """Whether a multiplier word may follow a number (a superset: "bn" also matches "abnormal");
    without one, the plain number pattern finds exactly what ``_NUMBER_RE`` would."""
    if "thousand" in lower or "illion" in lower or "bn" in lower:
        return True
    return not lower.isascii() and _CJK_MULTIPLIER_RE.search(lower) is not None


def _digit_numbers(lower: str) -> list[tuple[float, int]]:
    """Numbers written in digits, with their positions."""
    if not _has_multiplier(lower):
        return [(value, m.start()) for m in _PLAIN_NUMBER_RE.finditer(lower) for value in _parse_digits(m.group())]
    found: list[tuple[float, int]] = []
    for m in _NUMBER_RE.finditer(lower):
        values = _parse_digits(m.group(1))
        if m.group(2) and len(values) == 1:
            values = [values[0] * _MULTIPLIERS[m.group(2)]]
        found.extend((value, m.start()) for value in values)
    return found


def _parse_digits(tok: str) -> list[float]:
    if tok.isdigit():
        return [float(tok)] if len(tok) <= 30 else []
    digits = tok.rstrip(",.")
    if len(digits) > 30:
        return []  # an identifier or a digit run, not a quantity (and no float overflow)
    if digits.count(".") > 1:
        digits = digits[: digits.index(".", digits.index(".") + 1)]  # "1.2.3" -> "1.2"
    if "," in digits and not _THOUSANDS_RE.fullmatch(digits):
        # "1,2,3" is a list, not one number
        return [float(x) for x in digits.split(",") if x and x.replace(".", "", 1).isdigit()]
    return [float(digits.replace(",", ""))]


# CJK units are ints: a character is its code, a pair of characters the 32-bit number their
# UTF-16 code units make. Contexts then yield every character and pair of a text through two
# memoryview casts, several times faster than building one string per pair. Characters outside
# the Basic Multilingual Plane (rare Han extensions) match only as parts of pairs.
_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"
#: Set on the pair that starts a Hangul word: the stem, which must match a stem.
_STEM = 1 << 32


def _cjk_key(chars: str) -> int:
    """The unit of one or two BMP characters."""
    return int.from_bytes(chars.encode(_UTF16), sys.byteorder)


def _cjk_part(text: str, found: list[float], has_han: bool, has_hangul: bool) -> CjkNeedles:
    """A claim's Han and Hangul units (as text, see ``Features.units``); adds its Chinese numerals
    to ``found``."""
    chars: list[str] = []
    pairs: list[str] = []
    han_runs = _HAN_RUN_RE.findall(fold_chinese(text)) if has_han else []
    if han_runs:
        chars = list(set("".join(han_runs)).difference(_ZH_STOP))
        pairs = list({run[i : i + 2] for run in han_runs for i in range(len(run) - 1)})
        found.extend(_zh_numbers(text))
    words = _HANGUL_WORD_RE.findall(text) if has_hangul else []
    stems: list[str] = []
    singles: list[str] = []
    inner: list[str] = []
    if words:
        stems = list({word[:2] for word in words if len(word) > 1})
        singles = list({word for word in words if len(word) == 1})
        inner = list({word[i : i + 2] for word in words if len(word) > 2 for i in range(1, len(word) - 1)})
    return CjkNeedles(tuple(pairs), tuple(chars), tuple(inner), tuple(stems), tuple(singles))


def _pair_units(pairs: Sequence[str]) -> Iterable[int]:
    return memoryview("".join(pairs).encode(_UTF16)).cast("I") if pairs else ()


# ``_STEM | key`` of a two-character stem "ab" is the 64-bit number whose UTF-16 code units are
# a, b, 1, 0 (little-endian): appending "\x01\x00" to every stem and casting the encoded string
# builds all stem units in C. A one-syllable word "a" is a, 0, 1, 0.
_FAST_STEMS = sys.byteorder == "little"
_PAIR_STEM_TAIL = "\x01\x00"
_SYLLABLE_STEM_TAIL = "\x00\x01\x00"


def _stem_units(stems: Sequence[str]) -> Iterable[int]:
    """The stem units of Hangul stems, all of two characters or all of one."""
    if not stems:
        return ()
    if not _FAST_STEMS:
        return [_STEM | _cjk_key(stem) for stem in stems]
    tail = _PAIR_STEM_TAIL if len(stems[0]) == 2 else _SYLLABLE_STEM_TAIL
    return memoryview((tail.join(stems) + tail).encode(_UTF16)).cast("Q")


def _pairs(text: str) -> set[int]:
    """The units of all adjacent character pairs of a text."""
    raw = text.encode(_UTF16)
    pairs = set(memoryview(raw[: len(raw) // 4 * 4]).cast("I"))
    pairs.update(memoryview(raw[2 : 2 + (len(raw) - 2) // 4 * 4]).cast("I"))
    return pairs


def _cjk_context_units(text: str, found: list[float]) -> set[Unit]:
    """Every character and adjacent pair of a context text (a superset of what a claim can ask
    for) and the stems of its Hangul words; adds its Chinese numerals to ``found``."""
    folded = fold_chinese(text)
    units: set[Unit] = set(_pairs(folded))
    has_han = bool(_HAN_RE.search(folded))
    if has_han:
        # single characters: only Han ones are ever asked for
        units.update(memoryview(folded.encode(_UTF16)).cast("H"))
    if _HANGUL_RE.search(folded):
        # Each two-syllable stem is exactly two characters: joined, they cast like the pairs.
        units.update(_stem_units(_HANGUL_STEM_RE.findall(folded)))
        units.update(_stem_units(_HANGUL_SYLLABLE_WORD_RE.findall(folded)))
    if has_han:
        found.extend(_zh_numbers(text))
    return units


def _zh_numbers(text: str) -> list[float]:
    return [v for m in _ZH_NUMBER_RE.finditer(text) if (v := _zh_value(m.group(1))) is not None]


@dataclass(frozen=True, slots=True)
class CjkNeedles:
    """A claim's Han and Hangul units as text, each once, grouped by weight and by where a context
    holds them."""

    #: Han character pairs (weight 1), found anywhere
    han_pairs: tuple[str, ...]
    #: Han characters other than function characters (weight 0.5), found anywhere
    han_chars: tuple[str, ...]
    #: Hangul syllable pairs inside a word, after its first syllable (weight 0.5), found anywhere
    hangul_pairs: tuple[str, ...]
    #: Hangul stems: a word's first two syllables (weight 1), found only where a Hangul word starts
    stems: tuple[str, ...]
    #: one-syllable Hangul words (weight 1), found only as a whole one-syllable word
    words: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Features:
    """What the judge needs to know about one claim.

    Its content units, with weights: English stems 1; Han characters 0.5 and pairs 1 (a pair is
    nearer to a word); Hangul word stems 1 and inner syllable pairs 0.5. The judge matches them
    as text (``latin`` and ``needles``); ``units`` gives them as the numbers ``passage_units`` uses.
    """

    #: the English units (stems)
    latin: frozenset[str]
    numbers: list[float]
    negations: int
    hedged: bool
    absolutes: frozenset[str]
    #: the Han and Hangul units, as the text a context must contain (see ``Haystack``)
    needles: CjkNeedles | None = None
    #: the part of the units' total weight that is Han, and Hangul (the rest is English)
    han_weight: float = 0.0
    hangul_weight: float = 0.0

    @property
    def total(self) -> float:
        """The units' total weight (units of different kinds never coincide, so it adds up)."""
        return len(self.latin) + self.han_weight + self.hangul_weight

    @property
    def units(self) -> dict[Unit, float]:
        """The units with their weights, keyed like ``passage_units`` (built on request)."""
        units: dict[Unit, float] = dict.fromkeys(self.latin, 1.0)
        n = self.needles
        if n is not None:
            # The unit of a (BMP) character is its code and that of a pair the code units of the
            # pair read as one number.
            units.update(dict.fromkeys(map(ord, n.han_chars), 0.5))
            units.update(dict.fromkeys(_pair_units(n.han_pairs), 1.0))
            units.update(dict.fromkeys(_pair_units(n.hangul_pairs), 0.5))
            units.update(dict.fromkeys(_stem_units(n.stems), 1.0))
            units.update(dict.fromkeys(_stem_units(n.words), 1.0))
        return units


def features(text: str) -> Features:
    """Units, numbers, negation, hedging and absolute quantifiers of a sentence, in one scan."""
    text = prepare(text)
    lower = text.lower()
    words = _latin_words(lower)
    latin, found = _latin_part(lower, words)
    negations = _en_negations(words, lower)
    hedged = _en_hedged(words, text)
    absolute = _EN_ABSOLUTES.intersection(words)
    if text.isascii():
        return Features(frozenset(latin), found, negations, hedged, absolute)
    # Every Chinese cue is written in Han and every Korean one in Hangul: a script the claim lacks
    # needs no scan.
    has_han = _HAN_RE.search(text) is not None
    has_hangul = _HANGUL_RE.search(text) is not None
    n = _cjk_part(text, found, has_han, has_hangul)
    if has_han:
        negations += len(_ZH_NEGATION_RE.findall(_ZH_NOT_NEGATION_RE.sub("", text)))
        hedged = hedged or bool(_ZH_HEDGE_RE.search(text))
    if has_hangul:
        negations += len(_KO_NEGATION_RE.findall(text))
        hedged = hedged or _ko_hedged(text)
    if has_han or has_hangul:
        absolute = absolute.union(_CJK_ABSOLUTE_RE.findall(text))
    han = len(n.han_pairs) + 0.5 * len(n.han_chars)
    hangul = len(n.stems) + len(n.words) + 0.5 * len(n.hangul_pairs)
    return Features(frozenset(latin), found, negations, hedged, absolute, n, han, hangul)


def has_content(text: str) -> bool:
    """Whether a sentence holds any content unit or number (cheaper than ``features``)."""
    if _DIGIT_RE.search(text) or (not text.isascii() and _CJK_RE.search(text)):
        return True
    distinct = set(_latin_words(prepare(text).lower()))
    return any(map(_word_units(distinct).__getitem__, distinct))


def numbers(text: str) -> list[float]:
    """Numeric values in the text: digits (with thousands separators and multipliers such as
    'million', 万, 억), English number words from two upward, Chinese numerals before a measure word.
    """
    return features(text).numbers


def passage_units(text: str) -> tuple[set[Unit], tuple[float, ...], bool]:
    """A whole passage's content units and numbers, and whether it may contain a negation (a
    cheap over-approximation that tells when its sentences need a closer look)."""
    text = prepare(text)
    lower = text.lower()
    words = _latin_words(lower)
    latin, found = _latin_part(lower, words)
    may_negate = "n't" in lower or not _EN_NEGATION_WORDS.isdisjoint(words)
    units: set[Unit] = set(latin)
    if text.isascii():
        return units, tuple(found), may_negate
    units.update(_cjk_context_units(text, found))
    may_negate = may_negate or bool(_ZH_NEGATION_RE.search(text)) or _has_ko_negation(text)
    return units, tuple(found), may_negate


_HANGUL_FIRST, _HANGUL_LAST = "\uac00", "\ud7a3"


@dataclass(slots=True)
class Haystack:
    """Where a claim's units are looked for: a context text's English units, and the text itself
    (prepared and folded; empty when ASCII) for the Han and Hangul units.

    Matching CJK units as substrings gives exactly what the unit sets of ``passage_units`` give
    (a character or pair is in the set exactly when it is in the text; a stem exactly when it
    starts a Hangul word), without building a number for every character pair of every context.
    """

    latin: set[str]
    folded: str

    def weight(self, feats: Features) -> float:
        """The total weight of the claim's units found here (an exact sum of ones and halves)."""
        found = len(self.latin.intersection(feats.latin))
        needles = feats.needles
        text = self.folded
        if needles is None or not text:
            return float(found)
        contains = text.__contains__  # mapped over the needles: the loops run in C
        found += sum(map(contains, needles.han_pairs))
        halves = sum(map(contains, needles.han_chars)) + sum(map(contains, needles.hangul_pairs))
        for stem in filter(contains, needles.stems):
            found += _starts_word(text, stem)
        for word in filter(contains, needles.words):
            found += _is_word(text, word)
        return found + 0.5 * halves


def _starts_word(text: str, stem: str) -> bool:
    """Whether the two Hangul syllables ``stem`` start a Hangul word of ``text``."""
    i = text.find(stem)
    while i >= 0:
        if i == 0 or not _HANGUL_FIRST <= text[i - 1] <= _HANGUL_LAST:
            return True
        i = text.find(stem, i + 1)
    return False


def _is_word(text: str, syllable: str) -> bool:
    """Whether the Hangul ``syllable`` stands alone, a one-syllable Hangul word of ``text``."""
    i = text.find(syllable)
    while i >= 0:
        before_ok = i == 0 or not _HANGUL_FIRST <= text[i - 1] <= _HANGUL_LAST
        after_ok = i + 1 == len(text) or not _HANGUL_FIRST <= text[i + 1] <= _HANGUL_LAST
        if before_ok and after_ok:
            return True
        i = text.find(syllable, i + 1)
    return False


def passage_haystack(text: str) -> tuple[Haystack, tuple[float, ...], bool]:
    """What ``passage_units`` gives, with a :class:`Haystack` in place of the unit set."""
    haystack, found, latin_negation = passage_content(text)
    return haystack, found, latin_negation or cjk_may_negate(text)


def passage_content(text: str) -> tuple[Haystack, tuple[float, ...], bool]:
    """``passage_haystack`` with only the English part of the negation hint (free once the words
    are known); ``cjk_may_negate`` gives the rest, which only a passage that nearly supports a claim
    needs."""
    text = prepare(text)
    lower = text.lower()
    words = _latin_words(lower)
    latin, found = _latin_part(lower, words)
    latin_negation = "n't" in lower or not _EN_NEGATION_WORDS.isdisjoint(words)
    if text.isascii():
        return Haystack(latin, ""), tuple(found), latin_negation
    if _HAN_RE.search(text) is None:
        # Folding and Chinese numerals concern Han characters only: two scans saved on Korean text.
        return Haystack(latin, text), tuple(found), latin_negation
    found.extend(_zh_numbers(text))
    return Haystack(latin, fold_chinese(text)), tuple(found), latin_negation


def cjk_may_negate(text: str) -> bool:
    """Whether a passage may contain a Chinese or Korean negation (an over-approximation)."""
    text = prepare(text)
    return not text.isascii() and (bool(_ZH_NEGATION_RE.search(text)) or _has_ko_negation(text))


@dataclass(slots=True)
class Sentences:
    """A passage's sentences (see ``passage_sentences``), indexed so that a claim's weight in every
    sentence comes from one scan of the passage per claim unit, and numbers only when asked for.

    ``weights`` equals ``Haystack(units of the sentence, its folded text).weight`` sentence by
    sentence: the sentences are joined by line breaks, and a line break is no Hangul, so a stem or
    a one-syllable word found in the joined text is one in its own sentence.
    """

    parts: list[str]
    latin: list[set[str]]
    #: the sentences, lowercased (numbers are read from these) and folded (CJK units are found here)
    lower: list[str]
    folded: str
    starts: list[int]
    has_word_numbers: bool
    _numbers: list[tuple[float, ...]] | None = None
    _folded_parts: list[str] | None = None

    def weights(self, feats: Features) -> list[float]:
        """The claim's weight in each sentence (exact sums of ones and halves)."""
        found = [float(len(units.intersection(feats.latin))) for units in self.latin]
        needles = feats.needles
        if needles is None or not self.folded:
            return found
        if self._folded_parts is None:
            self._folded_parts = self.folded.split("\n")
        pairs, halves = needles.han_pairs, needles.han_chars + needles.hangul_pairs
        if pairs or halves:
            # Sentence by sentence, every needle looked for in C.
            for k, part in enumerate(self._folded_parts):
                contains = part.__contains__
                found[k] += sum(map(contains, pairs)) + 0.5 * sum(map(contains, halves))
        # A stem or word needs a look at its neighbours: each is found in the joined text, and each
        # occurrence is given to its sentence (a line break is no Hangul, so a word that starts or
        # ends a sentence starts or ends there in the joined text too).
        text = self.folded
        for group, check in ((needles.stems, _starts_word_at), (needles.words, _is_word_at)):
            for needle in group:
                last = -1
                i = text.find(needle)
                while i >= 0:
                    k = bisect_right(self.starts, i) - 1
                    if k != last and check(text, needle, i):
                        found[k] += 1.0
                        last = k
                    i = text.find(needle, i + 1)
        return found

    def numbers(self, i: int) -> tuple[float, ...]:
        """The numbers of sentence ``i``."""
        if self._numbers is not None:
            return self._numbers[i]
        part = self.lower[i]
        if self.has_word_numbers:
            found = _numbers_of(part, _latin_words(part))
        else:
            found = _digit_values(part) if _DIGIT_RE.search(part) else []
        if not part.isascii():
            found += _zh_numbers(self.parts[i])
        return tuple(found)


def _starts_word_at(text: str, stem: str, i: int) -> bool:
    return i == 0 or not _HANGUL_FIRST <= text[i - 1] <= _HANGUL_LAST


def _is_word_at(text: str, syllable: str, i: int) -> bool:
    return _starts_word_at(text, syllable, i) and (
        i + 1 == len(text) or not _HANGUL_FIRST <= text[i + 1] <= _HANGUL_LAST
    )


def sentence_index(text: str) -> Sentences:
    """The passage's sentences with what a claim is matched against (see :class:`Sentences`)."""
    text = prepare(text)
    parts = passage_sentences(text)
    joined = "\n".join(parts)
    lower = joined.lower()
    if lower.isascii():
        chunks = lower.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split("\n")
    else:
        chunks = " ".join(_LATIN_OR_BREAK_RE.findall(lower)).split("\n")
    distinct = set(" ".join(chunks).split())
    get = _word_units(distinct).__getitem__
    # One word list per sentence by C-level joins and splits: no per-word Python loop.
    latin: list[set[str]] = [set(map(get, chunk.split())) for chunk in chunks] if parts else []
    for units in latin:
        units.discard("")
    has_word_numbers = not _WORD_NUMBERS.keys().isdisjoint(distinct)
    folded = "" if lower.isascii() else fold_chinese(joined)
    starts = list(accumulate((len(x) + 1 for x in parts[:-1]), initial=0))
    index = Sentences(parts, latin, lower.split("\n"), folded, starts, has_word_numbers)
    if not has_word_numbers and _has_multiplier(lower) and _DIGIT_RE.search(lower):
        # A multiplier may follow its number across a sentence break ("3\nmillion"): the whole
        # passage is scanned at once, from the lowercased parts (lowercasing may change a text's
        # length: "İ"), and every sentence's numbers are kept.
        nums: list[list[float]] = [[] for _ in parts]
        lower_starts = list(accumulate((len(x) + 1 for x in index.lower[:-1]), initial=0))
        for value, pos in _digit_numbers(lower):
            nums[bisect_right(lower_starts, pos) - 1].append(value)
        for i, part in enumerate(parts):
            if not part.isascii():
                nums[i] += _zh_numbers(part)
        index._numbers = [tuple(n) for n in nums]
    return index


# --------------------------------------------------------------------------- numbers

# Applied to lowercased text.
_NUMBER_RE = re.compile(r"(\d[\d,.]*)(?:\s*(thousand|million|billion|trillion|bn|万|萬|亿|億|천|만|억))?")
_PLAIN_NUMBER_RE = re.compile(r"\d[\d,.]*")
# The same numbers without their trailing commas and periods (which _parse_digits strips anyway).
_STRIPPED_NUMBER_RE = re.compile(r"\d(?:[\d,.]*\d)?")
_NOT_NUMBER = bytes(c for c in range(128) if not (chr(c).isdigit() or chr(c) in ",."))
_ASCII_NUMBER_RUNS = bytes.maketrans(_NOT_NUMBER, b" " * len(_NOT_NUMBER))
_THOUSANDS_RE = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_CJK_MULTIPLIER_RE = re.compile("[万萬亿億천만억]")
_MULTIPLIERS = {
    "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "bn": 1e9,
    "万": 1e4, "萬": 1e4, "亿": 1e8, "億": 1e8, "천": 1e3, "만": 1e4, "억": 1e8,
}
_ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "兩": 2, "三": 3, "四": 4, "五": 5,
              "六": 6, "七": 7, "八": 8, "九": 9}
_ZH_UNITS = {"十": 10, "百": 100, "千": 1000}
# A Chinese numeral counts only before a measure word: 一 alone mostly means "a"/"one".
_ZH_NUMBER_RE = re.compile(
    "([零〇一二两兩三四五六七八九十百千]+)(?=[个個人年月日号號岁歲次名位元块塊倍天周週条條种種家本只隻分秒点點])"
)


def _zh_value(run: str) -> float | None:
    if not any(ch in _ZH_UNITS for ch in run):
        digits = 0
        for ch in run:  # 二〇一七 -> 2017
            digits = digits * 10 + _ZH_DIGITS[ch]
        value = digits
    else:
        value, pending = 0, 0
        for ch in run:  # 二十三 -> 23, 十九 -> 19, 一百零五 -> 105
            if ch in _ZH_DIGITS:
                pending = _ZH_DIGITS[ch]
            else:
                value += (pending or 1) * _ZH_UNITS[ch]
                pending = 0
        value += pending
    return float(value) if value > 1 else None


def number_matches(claimed: float, stated: float) -> bool:
    """Equal, or a reasonable approximation: a round claimed number (at most two significant digits,
    100 or more, not a year) within 10 % of the stated one ("almost 7,000" for 6,850)."""
    if claimed == stated:
        return True
    return may_approximate(claimed) and abs(claimed - stated) <= 0.1 * stated


def may_approximate(claimed: float) -> bool:
    """Whether ``claimed`` is round enough to stand for a nearby number (see ``number_matches``):
    any other claimed number matches only itself, which a set lookup answers."""
    if claimed < 100 or (claimed == int(claimed) and 1000 <= claimed <= 2100):
        return False
    magnitude: int = 10 ** (len(str(int(claimed))) - 2)
    return claimed % magnitude == 0


# --------------------------------------------------------------------------- negation, hedges

_EN_NEGATION_WORDS = _words("not no never none nobody nothing neither nor cannot without")
_EN_NOT_NEGATION_RE = re.compile(r"\b(?:not only|not just|no doubt|no longer than|nothing but)\b")
# Chinese words that contain a negation character but do not negate.
_ZH_NOT_NEGATION_RE = re.compile(
    "非常|未来|未來|无论|無論|不过|不過|不断|不斷|不仅|不僅|不但|不少|不久|不管|非洲|除非|莫非|毫无疑问|"
    "无数|無數|不得不|没错|沒錯|不错|不錯|是否|否则|否則"
)
# 别/別 is left out: it negates only in commands (别去) and far more often means "other" (别人).
_ZH_NEGATION_RE = re.compile("[不没沒未非无無勿否]")
_KO_NEGATION_RE = re.compile(r"(?:^|\s)(?:안|못|아니)(?=\s)|않|없|못하|못했|못한|못할|아니[다라고며었야에요]|아닌|아닙")
# The same matches, split so that each pattern starts with a character class the regex engine can
# skip ahead by: about twice as fast when only the presence of a negation matters.
_KO_NEGATION_INNER_RE = re.compile("않|없|못[하했한할]|아니[다라고며었야에요]|아닌|아닙")
_KO_NEGATION_WORD_RE = re.compile(r"\s(?:안|못|아니)(?=\s)")
_KO_NEGATION_FIRST_WORD_RE = re.compile(r"(?:안|못|아니)(?=\s)")

_EN_HEDGES = _words(
    "might could possibly perhaps probably likely unlikely maybe presumably apparently seemingly seem seems"
)
_ZH_HEDGE_RE = re.compile("可能|也许|也許|或许|或許|大概|恐怕|似乎|好像|估计|估計|说不定|說不定|大约|大約")
_KO_HEDGE_RE = re.compile(r"아마|것 ?같|듯|지도 모르|가능성|수도 있|[\uac00-\ud7a3]\s*수\s*(?:도\s*)?있")
_MAY_RE = re.compile(r"\bmay\b", re.IGNORECASE)

_EN_ABSOLUTES = _words("only always every everyone everything entirely solely exclusively")
_CJK_ABSOLUTE_RE = re.compile(
    "只有|所有|一直|每个|每個|从来|從來|永远|永遠|全部|总是|總是|唯一|" "모든|항상|오직|전부|언제나|반드시"
)


def _en_negations(words: list[str], lower: str) -> int:
    hits = _EN_NEGATION_WORDS.intersection(words)
    n = sum(map(words.count, hits)) if hits else 0
    if "n't" in lower:
        n += sum(1 for w in words if w.endswith("n't"))
    if n and hits:
        n -= len(_EN_NOT_NEGATION_RE.findall(lower))  # "not only", "no doubt"
    return n


def _en_hedged(words: list[str], text: str) -> bool:
    if not _EN_HEDGES.isdisjoint(words):
        return True
    if "appear to" in text or "appears to" in text or "Appears to" in text:
        return True
    if "may" in words:
        # "may" hedges; capitalised "May" after the first word is the month.
        return any(m.group(0) == "may" or m.start() == 0 for m in _MAY_RE.finditer(text))
    return False


def _has_ko_negation(text: str) -> bool:
    """``bool(_KO_NEGATION_RE.search(text))``, faster."""
    return bool(
        _KO_NEGATION_INNER_RE.search(text)
        or _KO_NEGATION_WORD_RE.search(text)
        or _KO_NEGATION_FIRST_WORD_RE.match(text)
    )


def _cjk_negations(text: str) -> int:
    n = len(_ZH_NEGATION_RE.findall(_ZH_NOT_NEGATION_RE.sub("", text)))
    return n + len(_KO_NEGATION_RE.findall(text))


def _ko_hedged(text: str) -> bool:
    for m in _KO_HEDGE_RE.finditer(text):
        token = m.group(0)
        if not token.endswith("있"):
            return True
        # "~ㄹ 수 있": the syllable before 수 must end in ㄹ (할, 될, 갈 ...); "~는 수" is not a hedge.
        syllable = token[0]
        if syllable == "도" or (ord(syllable) - 0xAC00) % 28 == 8:
            return True
    return False


def negated(text: str) -> bool:
    """Whether a sentence contains a negation (English, Chinese or Korean)."""
    text = prepare(text)
    lower = text.lower()
    n = _en_negations(_latin_words(lower), lower)
    if not text.isascii():
        n += _cjk_negations(text)
    return n > 0


# Where a negation may be, in lowercased text: starting with a literal keeps the scan fast; every
# hit is confirmed by ``negated`` on its sentence ("piano" ends in "no").
_NEGATION_HINT_RE = re.compile(r"n(?:ot|o|ever|one|obody|othing|either|or)\b|cannot|without|n't")


def negated_sentences(text: str) -> list[str]:
    """The sentences of a passage (as ``passage_sentences`` splits it) that contain a negation."""
    text = prepare(text)
    parts = passage_sentences(text)
    lower = "\n".join(parts).lower()
    positions = [m.start() for m in _NEGATION_HINT_RE.finditer(lower)]
    if not text.isascii():
        positions += [m.start() for m in _ZH_NEGATION_RE.finditer(lower)]
        positions += [m.start() for m in _KO_NEGATION_RE.finditer(lower)]
    if not positions:
        return []
    starts = list(accumulate((len(x) + 1 for x in parts[:-1]), initial=0))
    hit = sorted({bisect_right(starts, pos) - 1 for pos in positions})
    return [parts[i] for i in hit if negated(parts[i])]


def absolutes(text: str) -> frozenset[str]:
    """Absolute quantifiers ("only", "always", 只有, 모든 ...): a claim adding one overgeneralises."""
    text = prepare(text)
    found = _EN_ABSOLUTES.intersection(_latin_words(text.lower()))
    if not text.isascii():
        found = found.union(_CJK_ABSOLUTE_RE.findall(text))
    return found


# --------------------------------------------------------------------------- explanations


def missing_terms(text: str, against: Haystack) -> list[str]:
    """The text's content words (as written) whose units ``against`` lacks, in order, once each."""
    out: list[str] = []
    text = prepare(text)
    surface = _LATIN_SURFACE_RE.findall(text)
    unit_of = _word_units({w.lower() for w in surface})
    for word in surface:
        unit = unit_of[word.lower()]
        if unit and unit not in against.latin:
            out.append(word)
    if not text.isascii():
        context = against.folded
        folded = fold_chinese(text)
        for m in _HAN_RUN_RE.finditer(folded):
            run, shown = m.group(0), text[m.start() : m.end()]
            # A character is covered if it, or a pair it belongs to, is in the context.
            known = [c not in _ZH_STOP and c in context for c in run]
            paired = [run[i : i + 2] in context for i in range(len(run) - 1)]
            covered = [
                k or (i > 0 and paired[i - 1]) or (i < len(paired) and paired[i]) for i, k in enumerate(known)
            ]
            piece = ""
            for ch, ok in zip([*shown, ""], [*covered, True], strict=True):
                if not ok:
                    piece += ch
                    continue
                piece = piece.strip(_ZH_STOP_CHARS)
                if piece:
                    out.append(piece)
                piece = ""
        for word in _HANGUL_WORD_RE.findall(text):
            if not (_starts_word(context, word[:2]) if len(word) > 1 else _is_word(context, word)):
                out.append(word)
    return list(dict.fromkeys(out))
