<?php

declare(strict_types=1);

namespace Tokenlock\Tests;

use Tokenlock\Exception;
use Tokenlock\Files;
use Tokenlock\Tests\Support\Channel;
use Tokenlock\Tests\Support\Child;
use Tokenlock\Tests\Support\TempDirTestCase;
use Tokenlock\Tests\Support\Tool;

use function Tokenlock\increment;
use function Tokenlock\readCounter;

/**
 * Holders that are killed or stopped. Workers of this module and the
 * command increment one counter while this module's are killed with
 * SIGKILL wherever they are: no value is handed out twice, none is lost.
 * A holder stopped past its lease is taken over, and its late commit is
 * fenced off.
 */
final class KillStopTest extends TempDirTestCase
{
    private function nativeWorker(string $c, string $log): Child
    {
        return Child::start(function (Channel $ch) use ($c, $log): void {
            // O_APPEND: lines of different workers never mix.
            $h = fopen($log, 'ab');
            for ($i = 0; $i < 300; ++$i) {
                fwrite($h, increment($c, ['wait' => 60, 'sync' => 'none']) . "\n");
            }
        });
    }

    /** Polls the counter until it reaches $at; a minute without progress fails. */
    private function awaitCount(string $c, int $at): void
    {
        $giveUp = microtime(true) + 60;
        while ((int) (readCounter($c) ?? 0) < $at) {
            if (microtime(true) > $giveUp) {
                $this->fail("the counter stayed below $at for a minute: the workers are stuck");
            }
            usleep(1000);
        }
    }

    public function testKillingHoldersAmongModuleAndCommandIncrementersLosesNothing(): void
    {
        $c = "$this->dir/k.count";
        $log = "$this->dir/values";
        $command = [];
        for ($i = 0; $i < 2; ++$i) {
            $command[] = Child::start(function (Channel $ch) use ($c, $log): void {
                $h = fopen($log, 'ab');
                for ($n = 0; $n < 40; ++$n) {
                    [$status, $out, $err] = Tool::run(['incr', '-w', '60', '--sync', 'none', $c]);
                    if ($status !== 0) {
                        throw new \RuntimeException("tokenlock incr: $err");
                    }
                    fwrite($h, $out);
                }
            });
        }
        $native = [$this->nativeWorker($c, $log), $this->nativeWorker($c, $log), $this->nativeWorker($c, $log)];
        $killed = 0;
        for ($round = 0; $round < 6; ++$round) {
            $this->awaitCount($c, (int) (readCounter($c) ?? 0) + 20);
            $victim = array_shift($native);
            $this->assertSame(128 + SIGKILL, $victim->kill());
            ++$killed;
            $native[] = $this->nativeWorker($c, $log);
        }
        foreach (array_merge($native, $command) as $w) {
            $this->assertSame(0, $w->wait(), 'a surviving worker ended well');
        }
        $values = array_map('intval', file($log, FILE_IGNORE_NEW_LINES));
        $this->assertSame([], array_values(array_unique(array_diff_assoc($values, array_unique($values)))), 'no value was handed out twice');
        $final = readCounter($c);
        $this->assertGreaterThanOrEqual(count($values), $final, 'every value handed out is counted');
        // A killed worker may have committed one increment it never reported.
        $this->assertLessThanOrEqual(count($values) + $killed, $final);
        $this->assertGreaterThanOrEqual(max($values), $final);
        $this->assertLessThanOrEqual($killed, count(array_diff(range(1, $final), $values)), 'no more unreported values than killed workers');
        $this->assertSame('free', Tool::status("$c.lock")['state'], 'the lock is free at the end');
        $this->assertNoTemporaryFiles($this->dir);
    }

    public function testAHolderStoppedPastItsLeaseIsTakenOverAndItsLateCommitRefused(): void
    {
        $f = "$this->dir/page";
        file_put_contents($f, "first\n");
        $holder = Child::start(function (Channel $ch) use ($f): void {
            try {
                Files::update($f, "$f.lock", function (?string $current) use ($ch): array {
                    $ch->send('in');
                    // Stopped here by the test; then told to go on.
                    $ch->receive();
                    return ["late\n", null];
                }, ['sync' => 'file', 'wait' => 5.0, 'lease_us' => 1000000]);
                $ch->send('written');
            } catch (Exception $e) {
                $ch->send($e->getError());
            }
        });
        $this->assertSame('in', $holder->channel->receive(), 'the holder is in its critical section');
        posix_kill($holder->pid, SIGSTOP);
        // Its lease (1 s) and the skew allowance (1 s) run out; the command
        // then takes the lock over and writes.
        [$status, , $err] = Tool::run(['write', '--lock', "$f.lock", '-w', '10', $f], "taker\n");
        $this->assertSame(0, $status, $err);
        posix_kill($holder->pid, SIGCONT);
        $holder->channel->send('go');
        $this->assertSame('lock_lost', $holder->channel->receive(), 'the late commit is refused');
        $this->assertSame(0, $holder->wait());
        $this->assertSame("taker\n", file_get_contents($f), 'the taker\'s data is intact');
        $this->assertNoTemporaryFiles($this->dir);
    }
}
