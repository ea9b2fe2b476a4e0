"""People's labels of the judged answers: the label store (``store``), the labels as the corrected figures
read them (``labels``), what a reviewer is shown of an answer (``items``), a review of one queue
(``session``), the review page (``app``, run by ``serve``) and labels made elsewhere (``imports``).

Modules are imported by name; this one imports none of them, so reading labels never loads the web stack.
"""
