"""The report's accepted-length histograms (observed vs the analytic law)."""

from specexact.audit import accepted_length_histograms


def check(name, worst, details, passed=True, pvalue=0.5):
    return {"case": "c", "name": name, "worst": worst, "details": details, "passed": passed, "pvalue": pvalue}


def test_raw_counts_in_details_are_preferred():
    chk = check("accepted_length[class 0]", [["N=1", 5.0, 4.0]],
                {"num_bins": 3, "observed_counts": [10, 5, 85], "expected_probs": [0.1, 0.05, 0.85]})
    (h,) = accepted_length_histograms([chk])
    assert h["source"] == "details" and h["labels"] == ["N=0", "N=1", "N=2"]
    assert h["observed"] == [10, 5, 85] and h["expected"] == [10.0, 5.0, 85.0]


def test_binned_worst_entries_are_sorted_by_length_when_they_cover_all_bins():
    worst = [["N=2 (+1 more)", 30.0, 25.0], ["N=0", 50.0, 55.0], ["N=1", 20.0, 20.0]]
    (h,) = accepted_length_histograms([check("accepted_length[class 1]", worst, {"num_bins": 3}, False, 1e-9)])
    assert h["source"] == "binned" and h["labels"] == ["N=0", "N=1", "N=2 (+1 more)"]
    assert h["observed"] == [50.0, 20.0, 30.0] and h["expected"] == [55.0, 20.0, 25.0]
    assert h["passed"] is False and h["pvalue"] == 1e-9


def test_incomplete_or_degenerate_laws_have_nothing_to_plot():
    partial = check("accepted_length[class 0]", [["N=0", 1.0, 1.0]], {"num_bins": 7})
    greedy = check("accepted_length[class 1]", [], {"num_bins": 1})
    other = check("sequence_law[class 0]", [["1 2", 1.0, 1.0]], {"num_bins": 1})
    hs = accepted_length_histograms([partial, greedy, other])
    assert [h["source"] for h in hs] == ["none", "none"] and all(not h["observed"] for h in hs)
