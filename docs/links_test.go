package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/mcpgate/mcpgate/internal/store/storetest"
)

// TestLinksResolve: every relative link and image in README.md and
// docs/*.md names a file or directory of the repository, and every #anchor
// into a Markdown file names one of its headings as GitHub renders them;
// and every document in docs/ is linked from the README.
func TestLinksResolve(t *testing.T) {
	root, err := storetest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{filepath.Join(root, "README.md")}, docs...)
	anchors := map[string]map[string]bool{} // Markdown file → its heading anchors
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchors[path] = headingAnchors(string(b))
		return anchors[path], nil
	}

	linked := map[string]bool{} // repository-relative paths the README links to
	checked := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, l := range links(string(b)) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(l.target, "#")
			target := file
			if path != "" {
				target = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
			}
			trel, _ := filepath.Rel(root, target)
			trel = filepath.ToSlash(trel)
			if rel == "README.md" {
				linked[trel] = true
			}
			if strings.HasPrefix(trel, "../") {
				t.Errorf("%s:%d: %s leads out of the repository", rel, l.line, l.target)
				continue
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s:%d: %s: no such file %s", rel, l.line, l.target, trel)
				continue
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			a, err := anchorsOf(target)
			if err != nil {
				t.Fatal(err)
			}
			if !a[anchor] {
				t.Errorf("%s:%d: %s: %s has no heading #%s", rel, l.line, l.target, trel, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the link parser is broken")
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		if rel = filepath.ToSlash(rel); !linked[rel] {
			t.Errorf("%s is not linked from README.md", rel)
		}
	}
}

// link is one Markdown link or image: its target and the line it is on.
type link struct {
	target string
	line   int
}

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// links returns the inline links and images of a Markdown text, outside
// fenced code blocks and code spans.
func links(text string) []link {
	var out []link
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{target: strings.Trim(m[1], "<>"), line: i + 1})
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the ATX headings of a
// Markdown text: lowercased, punctuation but '-' and '_' dropped, spaces
// turned to '-', and a repeated anchor numbered (-1, -2…).
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fenced || !ok || !strings.HasPrefix(line, "#") || len(line)-len(strings.TrimLeft(line, "#")) > 6 {
			continue
		}
		a := slug(strings.TrimSpace(title))
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// slug is GitHub's anchor for a heading's text.
func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
