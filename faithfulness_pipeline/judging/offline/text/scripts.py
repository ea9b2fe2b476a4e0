"""Scripts: the Han and Hangul character classes, and the normalisation every other step applies first.

``prepare`` (NFKC and straight apostrophes, for matching only) and ``fold_chinese`` (common Traditional
characters to Simplified, so that a zh-TW answer matches a zh-CN context). The foundation of the text
modules: it imports none of them, and they all take their script patterns from here.
"""

from __future__ import annotations

import re
import unicodedata

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
HANGUL = "\uac00-\ud7a3"
CJK_RE = re.compile(f"[{_HAN}{HANGUL}]")
HAN_RE = re.compile(f"[{_HAN}]")
HAN_RUN_RE = re.compile(f"[{_HAN}]+")
HANGUL_RE = re.compile(f"[{HANGUL}]")
HANGUL_WORD_RE = re.compile(f"[{HANGUL}]+")
HANGUL_FIRST, HANGUL_LAST = "\uac00", "\ud7a3"

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
