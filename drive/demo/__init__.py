"""`drive demo`: the whole pipeline on built-in data (:mod:`drive.demo.run`) and its report with
acceptance criteria (:mod:`drive.demo.report`)."""
