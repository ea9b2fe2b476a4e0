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

One module per topic, each importing only those before it: ``scripts`` (script classes, NFKC,
Traditional -> Simplified), ``numbers``, ``words`` (word lists, splitting, stems), ``sentences``,
``cues`` (negation, hedges, absolutes), ``units`` (a claim's content units) and ``haystack`` (what
a claim is matched against). Import each name from the module that defines it: a name another module
takes is public, and a leading underscore marks one its own module alone uses.
"""
