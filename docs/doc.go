// Package docs holds mcpgate's user documentation, one Markdown file per
// topic, linked from the README. Its Go code is the test that every
// relative link in README.md and docs/*.md leads somewhere: the file
// exists, and an #anchor names one of its headings.
package docs
