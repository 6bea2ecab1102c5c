package config

import (
	"strings"

	"onprem.dev/onprem/installer/quote"
)

// closest returns the candidate nearest to s, or "" when none is close
// enough to be what the operator meant. Names are compared case-insensitively
// with the Levenshtein distance counting a transposition of two neighbouring
// letters as one edit (mdoe → mode), and a candidate is close enough when the
// distance is at most a third of the longer name (at least 1, at most 3).
// Ties go to the earlier candidate.
func closest(s string, candidates []string) string {
	longest := 0
	for _, c := range candidates {
		longest = max(longest, len(c))
	}
	if len(s) > 4*(longest+3) {
		return ""
	}
	ls := strings.ToLower(s)
	best, bestDist := "", -1
	for _, c := range candidates {
		// A name with more than 3 runes more than c is too far from it
		// (and a value of megabytes is not compared rune by rune).
		if len(ls) > 4*(len(c)+3) {
			continue
		}
		d := editDistance(ls, strings.ToLower(c))
		limit := min(max(max(len(ls), len(c))/3, 1), 3)
		if d > limit {
			continue
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// DidYouMean is the hint for a misspelt name (did you mean "mode"?), or
// "" when no candidate is close.
func DidYouMean(s string, candidates []string) string { return didYouMean(s, candidates) }

// didYouMean is the hint for a misspelt name, or "" when nothing is close.
func didYouMean(s string, candidates []string) string {
	if c := closest(s, candidates); c != "" {
		return "did you mean " + quote.Value(c) + "?"
	}
	return ""
}

// editDistance is the optimal-string-alignment distance between a and b: the
// Levenshtein distance where swapping two neighbouring runes is one edit.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// Three rows are enough: the current one and the two before it.
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// quoteList formats names for a message: a, b, c.
func quoteList(names []string) string {
	return strings.Join(names, ", ")
}
