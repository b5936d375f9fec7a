// Package chart draws step charts as SVG: how many calls an upstream had in
// flight over time, one panel per run, with the cap as a dashed line. It is
// what `make bench` draws results/cap.svg with.
//
// The input is the upstream's own record of entries and exits (see Steps),
// so the picture shows what the upstream saw, not what callers were told.
package chart
