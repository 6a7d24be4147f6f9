#pragma once
// `statelens diff` output: one diff (diff/diff.h) rendered as JSON, text, Markdown, CSV, HTML or JUnit XML.
// Every renderer returns the whole document; callers write it with writeFileAtomically.
//
// Conventions shared by the formats:
//   - Rule indices in JSON and CSV are 0-based, as in the JSON "rules" array. What people read (text,
//     Markdown, HTML, JUnit, and the explanations and messages everywhere) numbers rules from 1, as rule
//     files are numbered: index 0 is "rule 1".
//   - Text from checkpoints is untrusted. Text, Markdown and CSV, which are printed to terminals, show it
//     as util/terminal_text.h does: \t \n \r, and \xNN for every other C0 control, DEL, C1 control and
//     byte that is not valid UTF-8 (names and free text alike), so a key cannot move a terminal's cursor.
//     HTML and JUnit XML replace invalid UTF-8 with U+FFFD and show C0 controls and DEL as their Unicode
//     control pictures (ESC -> U+241B, DEL -> U+2421), C1 controls and U+FFFE/U+FFFF as U+FFFD, so a key
//     cannot break the document; their free text (explanations, messages) keeps tabs and line breaks.
//     JSON carries the names as they are, invalid UTF-8 replaced with U+FFFD and controls JSON-escaped.
//   - dtype_mismatch rows load (load_state_dict casts); they count as failures only with failOnDtype.
//     `load_succeeds` in the JSON and the text verdict honour failOnDtype, so they agree with the exit
//     code a CI job gets.
//
// JSON: the object documented once, in docs/json-output.md ("diff"); its "a" and "b" objects are the `source`
// object of `statelens ls --format json`. Without checkRules' issues, "rule_issues" lists the rule set's
// compile errors from the diff (kind "invalid"); without suggestions, "suggestions" is [].
//
// CSV (RFC 4180, CRLF, a header row): status,a,b,reason,rule,a_shape,b_shape,a_dtype,b_dtype,explanation,
// one line per diff row, shapes as "[2, 3]". Spreadsheets run a cell that starts with = + - @ (or a tab or
// CR) as a formula, so such a cell gets a leading apostrophe; strip one leading apostrophe from those
// cells to get the cell's text back (control characters in it stay escaped, as above).
//
// Pairs (an unexpected and a missing row that point at each other, DiffRow::partner) are one line in text,
// Markdown and HTML: A's names beside B's, listed before the other differences.
//
// Text: the counts first, then the differences folded by index template (failures first) with the first
// row's explanation, rule issues, suggestions, and last the verdict line. Markdown: the sources, the verdict,
// the counts, then tables of folded differences, rules, rule issues and suggestions; names sit in code
// spans with `|` escaped for GFM tables.
//
// JUnit XML: one testsuite "load_state_dict" with a testcase per row that is not a match
// (classname = the status, name = the row's name as rowName gives it) plus one testcase "strict=True" for
// the load as a whole, so a clean diff still reports one passing test.
// Failing: shape_mismatch, missing, unexpected (and dtype_mismatch with failOnDtype). Passing: renamed,
// dropped, dtype_mismatch otherwise. A second testsuite "rules" has a testcase per rule issue, failing for
// danger ones (invalid patterns, collisions, round-trip failures). tests/failures add up per suite and in
// <testsuites>.
//
// HTML: one self-contained page (inline CSS and a small inline script for the filter box and the status
// toggles; a Content-Security-Policy that allows only those two, by hash, and nothing from the network).
// Light and dark colours follow prefers-color-scheme. Every folded row is a <details> listing its rows
// (the first 1,000 of a group; JSON and CSV have them all); differences come first, matches last and
// toggled off. The markup is also well-formed XML.

#include "diff/diff.h"
#include "diff/rule_checks.h"
#include "model/source.h"
#include "report/source_report.h"
#include "rules/rule.h"
#include "suggest/suggestions.h"
#include "values/tensor_compare.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sl {

struct DiffReportInput {
    const Source& a; // the checkpoint
    const Source& b; // the model
    const RuleSet& rules; // the rules the diff ran with
    const DiffResult& diff;
    const std::vector<RuleIssue>* ruleIssues = nullptr; // checkRules' output, when it was run
    const std::vector<Suggestion>* suggestions = nullptr;
    bool failOnDtype = false;
    // `diff --values`: one comparison per diff row (not compared where a side is missing). JSON rows gain
    // "equal_bytes", "max_abs_diff", "max_rel_diff" and "cosine" (null where not compared), CSV the same
    // columns, and the other formats a section listing the pairs whose values differ.
    const std::vector<values::ValueComparison>* values = nullptr;
    // `diff --match-content`: A-only keys whose bytes equal B-only keys; JSON gains "content_matches":
    // [{"a": name, "b": [names]}], the other formats a section.
    const std::vector<values::ContentMatch>* contentMatches = nullptr;
};

enum class DiffReportFormat : uint8_t { Text, Json, Markdown, Csv, Html, Junit };
std::string_view diffReportFormatName(DiffReportFormat f); // "text", "json", "markdown", "csv", "html", "junit"
// Also accepts "md", "txt" and "xml" (JUnit); nullopt for anything else.
std::optional<DiffReportFormat> parseDiffReportFormat(std::string_view name);

std::string renderDiffReport(const DiffReportInput& in, DiffReportFormat format);
// The same handed to `sink` in parts (JSON streams its rows out in pieces of about a megabyte).
void renderDiffReport(const DiffReportInput& in, DiffReportFormat format, const TextSink& sink);

std::string diffToJson(const DiffReportInput& in);
void diffToJson(const DiffReportInput& in, const TextSink& sink);
std::string diffToText(const DiffReportInput& in);
std::string diffToMarkdown(const DiffReportInput& in);
std::string diffToCsv(const DiffReportInput& in);
std::string diffToHtml(const DiffReportInput& in);
std::string diffToJunit(const DiffReportInput& in);

// One line: "a strict load_state_dict would succeed: ..." or "... would fail: 2 missing, 1 unexpected".
std::string diffVerdict(const DiffSummary& summary, bool failOnDtype);

// Whether a row is a failure in the JUnit sense (and for the verdict).
bool rowFails(RowStatus status, bool failOnDtype);

} // namespace sl
