package bridge

// CheckFor is checkFor for the external tests of this package.
var CheckFor = checkFor
