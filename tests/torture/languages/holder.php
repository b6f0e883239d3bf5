<?php
// A PHP locker driven line by line on stdin (waiters.py), as holder.pl:
//   hold   acquire LOCKDIR, print "A <monotonic ns>"; the next line releases
//          it, printing "R <monotonic ns>" just before the release
//   cycle  acquire, print "A ns" and "R ns", release
//   php holder.php MODULE LOCKDIR
[, $module, $lockDir] = $argv + [null, null, null];
if ($lockDir === null) {
    fwrite(STDERR, "usage: holder.php MODULE LOCKDIR\n");
    exit(2);
}
require $module;
while (($cmd = fgets(STDIN)) !== false) {
    $lock = \Tokenlock\Lock::acquire($lockDir, ['wait' => 30]);
    echo 'A ', hrtime(true), "\n";
    if (trim($cmd) === 'hold') {
        fgets(STDIN);
    }
    echo 'R ', hrtime(true), "\n";
    $lock->release();
}
